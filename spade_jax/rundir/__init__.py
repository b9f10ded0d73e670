"""What a run writes and reads back: the run directory (local or gs://, `paths.py`), Orbax checkpoints
(`checkpoints.py`) and the metrics log (`metrics.py`: metrics.jsonl and TensorBoard). A damaged file is said in
one line and set aside, never silently reused.
"""
