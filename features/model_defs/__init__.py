"""Model definitions that training figures are counted on or that the testbed trains.

Every module here imports torch; the product never imports them. Each
domain module (``vision``, ``detection``, ``language``, ``transformer_xl``,
``speech``, ``recsys``, ``graph``, ``generative``) defines the models no
library has, after their published architectures, and a ``RECIPES`` list
binding catalogue names to them; ``registry.all_recipes`` collects them for
``features.workload_counting``. ``testbed`` holds the testbed's own models.
"""
