"""Helpers shared by test modules of several folders (imported, never collected)."""
