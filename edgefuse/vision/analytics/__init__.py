"""Analytics over tracks: counting lines (in/out per class) and polygon zones (occupancy, dwell)."""
