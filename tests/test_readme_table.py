"""README's held-out figures are the report's, generated and never typed."""

from __future__ import annotations

import json

from training.readme_table import README, SUMMARY, generated_block, held_out_markdown


def _stats(n, physics, pure_ml, residual, coverage=90.0, width=50.0):
    return {"n": n, "physics_mape": physics, "pure_ml_mape": pure_ml, "residual_mape": residual, "coverage": coverage, "mean_relative_width": width}


def test_rows_name_every_protocol_and_the_groups_where_the_residual_loses():
    summary = {
        "protocols": {
            "leave one GPU out": {
                "all": _stats(1200, 22.5, 31.25, 15.0),
                "groups": {"A10": _stats(20, 12.0, 18.0, 9.0), "B200": _stats(56, 26.0, 27.0, 26.0)},
            }
        },
        "speedups": {"intra_node_link": _stats(126, 5.3, None, 8.0, 99.2, 65.0), "precision": _stats(90, 14.0, None, 9.0, 85.0, 80.0)},
        "speedup_groups": {"precision": {
            "V100": {"n": 30, "coverage": 70.0, "mean_relative_width": 60.0},
            "A100": {"n": 30, "coverage": 92.0, "mean_relative_width": 80.0},
            "H100": {"n": 30, "coverage": 93.3, "mean_relative_width": 100.0},
        }},
        "no_harm_violations": [{"protocol": "leave one GPU out", "group": "X", "n": 12, "residual_mape": 30.0, "physics_mape": 20.0}],
        "refits": {"MLPerf, k runs of each GPU type": {"3": {"mape_no_refit": 40.0, "mape_refit": 12.5}}},
        "losses_within_groups": [
            {"protocol": "leave one GPU out", "group": "H100", "within": "model tacotron2", "n": 204,
             "physics_mape": 12.6, "residual_mape": 34.9, "points_of_protocol_lost": 1.369},
            {"protocol": "leave one GPU out", "group": "V100", "within": "model gnmt", "n": 14,
             "physics_mape": 20.0, "residual_mape": 23.0, "points_of_protocol_lost": 0.04},
        ],
    }
    summary["protocols"]["leave one GPU out, by architecture"] = {
        "all": summary["protocols"]["leave one GPU out"]["all"],
        "groups": {"single": _stats(500, 21.0, 30.0, 12.0), "allreduce-local": _stats(700, 23.0, 32.0, 17.0)},
    }
    text = held_out_markdown(summary)
    # The same runs grouped another way show their groups rather than the totals again.
    assert ("| leave one GPU out, by architecture | 1,200 | as above | | | | | residual vs physics by group: "
            "single 12.0% vs 21.0%; allreduce-local 17.0% vs 23.0% |") in text
    assert "| leave one GPU out | 1,200 | 22.5% | 31.2% | 15.0% | 90.0% | 50.0% | B200 26.0% vs 26.0% |" in text
    assert "| PCIe to NVLink (Lambda) | 126 | 5.3% | 8.0% | 99.2% | 65.0% | none |" in text
    # 92.0% is within 88-92%, 93.3% above.
    assert "| fp32 to fp16 (Lambda) | 90 | 14.0% | 9.0% | 85.0% | 80.0% | 1 / 1 / 1 (lowest: V100 70.0%) |" in text
    assert "| MLPerf, k runs of each GPU type | 3 | 40.0% | 12.5% |" in text
    assert "breaks in 1 group: leave one GPU out: X (n=12, 30.0% against 20.0%)." in text
    assert ("Inside the groups, 2 cells (a model or GPU type inside a held-out group, n >= 10) lose more than 2 points; the costliest: "
            "leave one GPU out, H100, model tacotron2 (n=204, 34.9% against 12.6%: 1.37 points of the protocol).") in text


def test_readme_shows_the_shipped_report():
    summary = json.loads(SUMMARY.read_text())
    assert generated_block(README.read_text()) == held_out_markdown(summary), "run python -m training.readme_table"
    for name in summary["protocols"]:
        assert f"| {name} |" in README.read_text()
