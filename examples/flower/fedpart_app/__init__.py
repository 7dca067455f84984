"""A fedpart config run as a Flower app."""
