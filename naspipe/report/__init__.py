"""Tables regenerated from run directories (paper-style rows)."""
