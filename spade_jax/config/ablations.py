"""The SPADE paper's ablations as named sets of overrides: `ablation=no_corpus` (or several, comma-separated) on the
command line expands to the settings below, applied in order where it stands among the other overrides, and the
name is kept in the run's config (`RunConfig.ablation`). An unknown name is one ConfigError listing the known ones.

- no_corpus: designer prompts without a grounding document (the paper saw such a designer collapse onto one game);
- no_memory: designer prompts without the archive (no exemplars; mutation designs, which show an archived parent,
  are turned off with it); the archive itself still feeds the novelty gate and the agent's fill-ins;
- no_designer_training: the designer's samples are never trained (the agent's are);
- solve_rate: the designer is rewarded by the plateau on the unhinted win rate alone, no regret term;
- learning_potential: the designer is rewarded by how far the win rate is from its skill's slow average.
"""

from __future__ import annotations

__all__ = ["ABLATIONS", "ablation_overrides"]

ABLATIONS: dict[str, tuple[str, ...]] = {
    "no_corpus": ("selfplay.designer.use_corpus=false",),
    # mutation_share first: a mutation design needs the memory (DesignerConfig checks it on every change)
    "no_memory": ("selfplay.designer.mutation_share=0", "selfplay.designer.use_memory=false"),
    "no_designer_training": ("selfplay.train_designer=false",),
    "solve_rate": ("selfplay.reward.kind=solve_band",),
    "learning_potential": ("selfplay.reward.kind=learning_progress",),
}


def ablation_overrides(names: str) -> list[str]:
    """The overrides of the comma-separated ablation `names` ("" for none); ValueError naming an unknown one."""
    out: list[str] = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        if name not in ABLATIONS:
            raise ValueError(f"unknown ablation {name!r}; known: {', '.join(ABLATIONS)}")
        out += ABLATIONS[name]
    return out
