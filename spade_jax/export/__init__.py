"""What leaves a run: the model as a Hugging Face directory that `transformers` loads with the same logits
(`hf.py`), and the environment archive in the layout of the SPADE paper's released pool (`envs.py`).
"""
