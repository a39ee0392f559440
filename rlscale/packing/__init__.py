"""Sequence packing: several prompt + response sequences per row, microbatches by a token budget
(`plan`: the layout on the host; `layout`: the step's plans; `gather`: applying them on the
device)."""
