"""Every catalogue workload's recipe, in catalogue order."""

from __future__ import annotations

from features.model_defs.recipe import Probe, Recipe


def _testbed_recipe(name: str) -> Recipe:
    """A recipe counting one of the testbed's own models (``features.model_defs.testbed``)."""
    from features.model_defs.testbed import TESTBED_MODELS  # noqa: PLC0415 - imports torch

    model = TESTBED_MODELS[name]
    batch = model.make_batch(2)
    n_bytes = sum(t.numel() * t.element_size() for t in (*batch.inputs, batch.target)) / 2
    layout = ", ".join(f"{tuple(t.shape[1:]) or 'scalar'} {str(t.dtype).replace('torch.', '')}" for t in batch.inputs)

    def build() -> Probe:
        return Probe(model.build(), model.make_batch, lambda m, b: model.loss(m, b))

    return Recipe(
        name=name,
        domain="testbed",
        description=model.description,
        architecture=f"features.model_defs.testbed.TESTBED_MODELS[{name!r}]",
        build=build,
        device="cpu",
        input_bytes_per_sample=n_bytes,
        input_bytes_source=f"inputs {layout} plus the target, per sample: {n_bytes:g} B",
        default_batch_size_per_gpu=model.default_batch_size,
        input_shape=model.input_shape,
        sequence_length=model.sequence_length,
        extra_sources={
            "default_batch_size_per_gpu": ("configured", "the testbed collector's default batch size"),
        },
        notes="Trained by the project's own testbed."
        + (" Its embedding table has dense gradients: every parameter is exchanged each step." if "recsys" in name else ""),
    )


TESTBED_NAMES = ("testbed-recsys", "testbed-resnet", "testbed-transformer")


#: The modules of :mod:`features.model_defs` whose ``RECIPES`` the counters write to the catalogue.
RECIPE_MODULES = ("vision", "detection", "language", "transformer_xl", "speech", "recsys", "dlrm", "graph", "generative")


def all_recipes() -> list[Recipe]:
    """The recipes of every workload the counter writes to the catalogue."""
    import importlib  # noqa: PLC0415 - the modules import torch

    recipes: list[Recipe] = []
    for name in RECIPE_MODULES:
        recipes += importlib.import_module(f"features.model_defs.{name}").RECIPES
    recipes += [_testbed_recipe(name) for name in TESTBED_NAMES]
    return recipes
