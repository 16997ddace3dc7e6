"""Pure write-side domain: no I/O, no clocks, no drivers. Values in, events out."""
