"""Generated scenes with exact labels (shapes, text) and the sample clip made from them."""
