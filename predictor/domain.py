"""The training domain by combination: what a job shares with the runs the model learned from.

A residual learned on PS/Worker jobs of K80s over 10 GbE and of CPU processes
says little about PS/Worker on V100s, even though PS/Worker and V100 were
each seen. So the model's artefact records, besides single names and feature
ranges, the combinations it was trained on:

* ``framework``, ``software stack`` (stock, or vendor-tuned as MLPerf
  submissions are), ``model`` (the catalogue model; a model given by its
  figures is checked by family only) and ``model family`` (the workload catalogue's
  domain: vision, language, recommendation ...; ``custom`` likewise);
* ``architecture x device`` (the device family: ``V100``, ``K80``,
  ``cpu-host``) and ``architecture x network`` (the network tier; ``none``
  for one-host jobs);
* ``accumulation x model``: a step of several passes
  (``gradient_accumulation_steps`` above 1) of a model measured only in
  single-pass steps, or never. A one-pass step is not checked by it. The
  residual reads an accumulated step's launches and host work through features
  learned on the steps it saw; on a model never measured accumulating, its
  correction had made eight passes slower than eight separate steps.

Rule for a job outside them: each unseen fact keeps a share of the learned log
correction (``log residual x share``; several unseen facts multiply their
shares), so the prediction fades toward the physics. Training estimates each
fact's share by holding out values of that fact (:mod:`training.shrink`) and
records it in ``domain.shrink``; a fact it could not estimate keeps
:data:`SHRINK_PER_UNSEEN`. The interval is the pooled one, widened to hold the
intervals of both the faded and the unfaded prediction; the job's note says
which facts were unseen. Artefacts trained before these facts were recorded
skip the check (the single-name and range checks of :mod:`predictor.learned` stay).

Keys are built per distinct value or combination, never per row.
"""

from __future__ import annotations

import numpy as np

from features.catalog_arrays import catalog_arrays
from features.resolve import ResolvedJobs
from features.fields import ARCHITECTURES, SOFTWARE_STACKS
from features.table import factorize

#: Share of the learned log correction an unseen fact keeps where training recorded no estimate (it saw
#: one value of the fact, so nothing tested how far the correction carries to another): none of it,
#: the physics alone, the one share that never breaks the no-harm rule.
SHRINK_PER_UNSEEN = 0.0
#: Model family of a job whose model is given by its figures, not a catalogue name.
CUSTOM_FAMILY = "custom"
#: Network tier of a job that crosses no network.
NO_NETWORK = "none"
#: Combination names as stored in the artefact's ``domain.combinations``.
COMBINATIONS = ("architecture x device", "architecture x network", "accumulation x model")
#: Every checked fact, as named in notes and in the artefact's ``domain.shrink``.
FACTS = ("framework", "software stack", "model", "model family", *COMBINATIONS)
#: The artefact's ``domain`` key holding the seen values of each single fact.
_SEEN_KEYS = {"framework": "frameworks", "software stack": "software_stacks", "model": "models", "model family": "model_families"}


def fact_codes(resolved: ResolvedJobs) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per fact: each job's integer code into the fact's names (-1 on failed rows), and the names.

    Built from the resolved catalogue indices and one factorized framework
    column: no per-row text, so a million jobs cost a few integer passes.
    """
    cat = catalog_arrays()
    ok = resolved.ok

    def indexed(index: np.ndarray, names: list) -> tuple[np.ndarray, np.ndarray]:
        # -1 (a model given by its figures, a default link) picks the last name
        return np.where(ok, np.asarray(index) % len(names), -1), np.array(names, object)

    facts = {
        "model": indexed(resolved.workload_index, [w.name for w in cat.workloads.workloads] + [None]),  # a custom model counts once, by family
        "model family": indexed(resolved.workload_index, [w.domain for w in cat.workloads.workloads] + [CUSTOM_FAMILY]),
        "architecture": indexed(resolved.architecture_code, list(ARCHITECTURES) + [None]),
        # A part that is another's silicon with its links cut counts as that part (features.hardware).
        "device": indexed(resolved.device_index, list(cat.device_domain_families) + [None]),
    }
    links = list(cat.link_names) + [NO_NETWORK]
    one_host = np.isin(resolved.architecture_code, [ARCHITECTURES.index("single"), ARCHITECTURES.index("allreduce-local")])
    # A one-host job's default tier is one it never crosses.
    network = np.where(one_host, len(links) - 1, resolved.network_link_index)
    facts["network"] = indexed(network, links)
    # A single-pass step has no accumulation fact to check (None), an accumulated one is "accumulated".
    passes = resolved.passes_per_step if resolved.passes_per_step is not None else np.ones(len(ok))
    with np.errstate(invalid="ignore"):
        facts["accumulation"] = indexed((passes > 1).astype(np.int64), [None, "accumulated"])
    stack = resolved.software_stack_index if resolved.software_stack_index is not None else np.full(len(ok), -1)
    facts["software stack"] = indexed(np.asarray(stack, np.int64), list(SOFTWARE_STACKS) + [None])
    columns = resolved.table.columns
    if "framework" in columns:
        codes, names = resolved.table.codes("framework")
        text = [None if n is None or (isinstance(n, float) and np.isnan(n)) else str(n) for n in names]
        facts["framework"] = (np.where(ok, codes, -1), np.array(text, object))
    else:
        facts["framework"] = (np.full(len(ok), -1), np.array([], object))
    return facts


def combination_codes(facts: dict[str, tuple[np.ndarray, np.ndarray]], combination: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes and names ('a x b') of the two facts of ``combination``; -1 where either side is."""
    (lc, ln), (rc, rn) = (facts[name] for name in combination.split(" x "))
    codes = np.where((lc >= 0) & (rc >= 0), lc * len(rn) + rc, -1)
    return codes, np.array([f"{left} x {right}" for left in ln for right in rn], object)


def domain_facts(resolved: ResolvedJobs) -> dict[str, np.ndarray]:
    """Per job: framework, software stack, model, model family, architecture, device family, network tier and accumulation (None on failed rows)."""
    return {name: np.append(names, None)[codes] for name, (codes, names) in fact_codes(resolved).items()}


def _is_unseen(value, seen: set) -> bool:
    """A fact outside the recorded ones; a missing fact, or a combination with a missing side, is not checked."""
    return not (value is None or value in seen or value.endswith(" x None") or value.startswith("None x "))


def _present(codes: np.ndarray, names: np.ndarray) -> set:
    """The names ``codes`` take, leaving out missing ones and combinations with a missing side (never checked)."""
    present = (names[c] for c in np.unique(codes[codes >= 0]))
    return {n for n in present if n is not None and not n.endswith(" x None") and not n.startswith("None x ")}


def seen_domain(resolved: ResolvedJobs, rows: np.ndarray | None = None) -> dict[str, list]:
    """What training runs cover, for the artefact's metadata: frameworks, software stacks, model families, combinations.

    ``rows`` (a boolean mask) keeps the runs that count; all of them where not given.
    """
    facts = fact_codes(resolved)
    if rows is not None:
        facts = {name: (np.where(rows, codes, -1), names) for name, (codes, names) in facts.items()}
    return {
        "frameworks": sorted(str(v) for v in _present(*facts["framework"])),
        "software_stacks": sorted(str(v) for v in _present(*facts["software stack"])),
        "model_families": sorted(str(v) for v in _present(*facts["model family"])),
        "combinations": {name: sorted(_present(*combination_codes(facts, name))) for name in COMBINATIONS},
    }


def fact_values(facts: dict[str, tuple[np.ndarray, np.ndarray]], label: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes and names of one of :data:`FACTS` (a single fact or a combination)."""
    return combination_codes(facts, label) if label in COMBINATIONS else facts[label]


def _checks(domain: dict, facts: dict) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Per recorded fact: its label, each job's code of an unseen value (-1 where seen or missing) and the names."""
    checks = []
    for label in FACTS:
        seen = domain.get("combinations", {}).get(label) if label in COMBINATIONS else domain.get(_SEEN_KEYS[label])
        if seen is None:
            continue
        codes, names = fact_values(facts, label)
        unseen = np.append(np.array([_is_unseen(value, set(seen)) for value in names], bool), False)  # -1 picks False
        checks.append((label, np.where(unseen[codes], codes, -1), names))
    return checks


def unseen_labels(domain: dict, resolved: ResolvedJobs) -> list[str]:
    """The facts of :data:`FACTS` that some job lies outside of."""
    return [label for label, codes, _ in _checks(domain, fact_codes(resolved)) if (codes >= 0).any()]


def kept_note(share: float) -> str:
    """What a job outside the training domain keeps of the learned correction, in words."""
    if share <= 0.0:
        return "the prediction is the physics alone"
    percent = 100 * share
    return f"the prediction keeps {percent:.0f}% of the learned correction" if percent >= 1 else f"the prediction keeps {percent:.2g}% of the learned correction"


def unseen_facts(domain: dict, resolved: ResolvedJobs) -> tuple[np.ndarray, np.ndarray]:
    """Per job: the share of the learned correction it keeps (1.0 inside every recorded fact), and a note
    naming the facts it lies outside of (None where none).

    Facts the artefact does not record are not checked.
    """
    n = len(resolved.ok)
    share = np.ones(n)
    notes = np.full(n, None, object)
    if not any(key in domain for key in ("frameworks", "models", "model_families", "combinations")):
        return share, notes
    shares = domain.get("shrink", {})
    checks = _checks(domain, fact_codes(resolved))
    # Per check, the code of a job's unseen value (-1 where seen), packed into one integer per job.
    pattern = np.zeros(n, np.int64)
    radices, texts, kept = [], [], []
    for label, codes, names in checks:
        kept.append(float(shares.get(label, SHRINK_PER_UNSEEN)))
        share[codes >= 0] *= kept[-1]
        pattern = pattern * (len(names) + 1) + (codes + 1)
        radices.append(len(names) + 1)
        texts.append([f"{label} {value} is not in the training data" for value in names])
    faded = np.flatnonzero(pattern > 0)
    if not len(faded):
        return share, notes
    inverse, patterns = factorize(pattern[faded])
    written = []
    for packed in patterns:
        parts, part_share = [], 1.0
        for radix, text, keep in zip(reversed(radices), reversed(texts), reversed(kept)):
            packed, code = divmod(int(packed), radix)
            if code:
                parts.append(text[code - 1])
                part_share *= keep
        written.append("; ".join(reversed(parts)) + "; " + kept_note(part_share))
    notes[faded] = np.array(written, object)[inverse]
    return share, notes
