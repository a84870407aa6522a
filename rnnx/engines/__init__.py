"""Runners with one interface: named numpy inputs in, named numpy outputs out."""
