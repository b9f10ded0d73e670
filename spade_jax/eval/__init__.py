"""Held-out evaluation: code and QA suites (HumanEval, CHAMP, reasoning-gym), BFCL v4 multi-turn, text games,
and a model playing a pool of environments with training's own prompts (`registry.py` names the suites).
"""
