"""The training domain by combination: what a job shares with the runs the model learned from.

A residual learned on PS/Worker jobs of K80s over 10 GbE and of CPU processes
says little about PS/Worker on V100s, even though PS/Worker and V100 were
each seen. So the model's artefact records, besides single names and feature
ranges, the combinations it was trained on:

* ``framework``, ``model`` (the catalogue model; a model given by its
  figures is checked by family only) and ``model family`` (the workload catalogue's
  domain: vision, language, recommendation ...; ``custom`` likewise);
* ``architecture x device`` (the device family: ``V100``, ``K80``,
  ``cpu-host``) and ``architecture x network`` (the network tier; ``none``
  for one-host jobs).

Rule for a job outside them: each unseen fact halves the learned correction
(``log residual x 0.5 ** unseen``), so the prediction fades toward the
physics; its interval is the pooled one, widened to hold the intervals of
both the faded and the unfaded prediction; the job's note says which facts
were unseen. Artefacts trained before these facts were recorded skip the
check (the single-name and range checks of :mod:`predictor.learned` stay).

Keys are built per distinct value or combination, never per row.
"""

from __future__ import annotations

import numpy as np

from features.catalog_arrays import catalog_arrays
from features.resolve import ResolvedJobs
from features.fields import ARCHITECTURES
from features.table import factorize

#: Each unseen fact keeps this share of the learned log correction.
SHRINK_PER_UNSEEN = 0.5
#: Model family of a job whose model is given by its figures, not a catalogue name.
CUSTOM_FAMILY = "custom"
#: Network tier of a job that crosses no network.
NO_NETWORK = "none"
#: Combination names as stored in the artefact's ``domain.combinations``.
COMBINATIONS = ("architecture x device", "architecture x network")


def domain_facts(resolved: ResolvedJobs) -> dict[str, np.ndarray]:
    """Per job: framework, model, model family, architecture, device family and network tier (None on failed rows)."""
    cat = catalog_arrays()
    ok = resolved.ok
    families = np.array([d.family for d in cat.hardware.devices] + [None], object)
    domains = np.array([w.domain for w in cat.workloads.workloads] + [CUSTOM_FAMILY], object)
    models = np.array([w.name for w in cat.workloads.workloads] + [None], object)  # a custom model counts once, by family
    links = np.array(list(cat.link_names) + [NO_NETWORK], object)
    architectures = np.array(list(ARCHITECTURES) + [None], object)
    columns = resolved.table.columns
    framework = _text(columns["framework"]) if "framework" in columns else np.full(len(ok), None, object)
    facts = {
        "framework": framework,
        # -1 (figures given) picks the last entry
        "model": models[resolved.workload_index],
        "model family": domains[resolved.workload_index],
        "architecture": architectures[resolved.architecture_code],
        "device": families[resolved.device_index],
        "network": links[resolved.network_link_index],
    }
    one_host = np.isin(resolved.architecture_code, [ARCHITECTURES.index("single"), ARCHITECTURES.index("allreduce-local")])
    facts["network"] = np.where(one_host, NO_NETWORK, facts["network"])  # a default tier it never crosses
    return {name: np.where(ok, values, None) for name, values in facts.items()}


def _text(values: np.ndarray) -> np.ndarray:
    codes, names = factorize(values)
    text = np.array([None if n is None or (isinstance(n, float) and np.isnan(n)) else str(n) for n in names] + [None], object)
    return text[codes]


def _pairs(facts: dict[str, np.ndarray], combination: str) -> np.ndarray:
    """'a x b' per job for the two facts of ``combination``, built once per distinct pair."""
    left, right = (facts[name] for name in combination.split(" x "))
    lc, ln = factorize(left)
    rc, rn = factorize(right)
    code = lc.astype(np.int64) * (len(rn) + 1) + rc
    distinct, inverse = np.unique(code, return_inverse=True)
    names = np.array([f"{ln[c // (len(rn) + 1)]} x {rn[c % (len(rn) + 1)]}" for c in distinct], object)
    return names[inverse]


def seen_domain(resolved: ResolvedJobs) -> dict[str, list]:
    """What training runs cover, for the artefact's metadata: frameworks, model families, combinations."""
    facts = domain_facts(resolved)
    ok = resolved.ok
    return {
        "frameworks": sorted({str(v) for v in facts["framework"][ok] if v is not None}),
        "model_families": sorted({str(v) for v in facts["model family"][ok] if v is not None}),
        "combinations": {name: sorted(set(_pairs(facts, name)[ok])) for name in COMBINATIONS},
    }


def unseen_facts(domain: dict, resolved: ResolvedJobs) -> tuple[np.ndarray, np.ndarray]:
    """Per job: how many recorded facts it lies outside of, and a note naming them (None where none).

    Facts the artefact does not record are not checked.
    """
    n = len(resolved.ok)
    count = np.zeros(n, int)
    notes = np.full(n, None, object)
    if not any(key in domain for key in ("frameworks", "models", "model_families", "combinations")):
        return count, notes
    facts = domain_facts(resolved)
    checks = []
    if "frameworks" in domain:
        checks.append(("framework", facts["framework"], set(domain["frameworks"])))
    if "models" in domain:
        checks.append(("model", facts["model"], set(domain["models"])))
    if "model_families" in domain:
        checks.append(("model family", facts["model family"], set(domain["model_families"])))
    for name in COMBINATIONS:
        if name in domain.get("combinations", {}):
            checks.append((name, _pairs(facts, name), set(domain["combinations"][name])))
    for label, values, seen in checks:
        codes, names = factorize(values)
        for u, value in enumerate(names):
            if value is None or value in seen or value.endswith(" x None") or value.startswith("None x "):
                continue
            rows = resolved.ok & (codes == u)
            if not rows.any():
                continue
            count[rows] += 1
            text = f"{label} {value} is not in the training data"
            fresh = rows & (notes == None)  # noqa: E711
            notes[fresh] = text
            more = rows & ~fresh
            notes[more] = notes[more] + f"; {text}"
    faded = count > 0
    if faded.any():
        for k in np.unique(count[faded]):
            rows = count == k
            share = SHRINK_PER_UNSEEN ** int(k)
            notes[rows] = notes[rows] + f"; the learned correction is shrunk to {100 * share:.0f}% toward the physics"
    return count, notes
