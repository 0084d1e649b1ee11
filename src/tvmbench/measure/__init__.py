"""Timing, statistics, accuracy, isolation and environment: how numbers are made."""
