"""Scheduling policies for Tangram: pure, typed Python with no Django import."""
