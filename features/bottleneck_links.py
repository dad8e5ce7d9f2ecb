"""Which link is behind an io or communication bottleneck, per job."""

from __future__ import annotations

import numpy as np

from features.analytical import BreakdownArrays
from features.catalog_arrays import CatalogArrays, catalog_arrays
from features.resolve import ResolvedJobs


def bottleneck_links(
    resolved: ResolvedJobs, breakdown: BreakdownArrays, catalogs: CatalogArrays | None = None, code: np.ndarray | None = None
) -> np.ndarray:
    """Per job, the link behind an io or communication bottleneck (None for the others).

    ``code`` indexes :data:`features.analytical.BOTTLENECKS` (default: the
    largest PAI component). Communication names the slower of the intra-node
    link and the network; a PS/Worker network bound by the servers' NICs says so.
    """
    cat = catalogs or catalog_arrays()
    code = breakdown.bottleneck_code() if code is None else code
    names = np.array(cat.link_names + [None], object)
    host = np.where(resolved.device_index >= 0, cat.host_link_index[np.maximum(resolved.device_index, 0)], -1)
    intra = names[resolved.intra_link_index]
    network = names[resolved.network_link_index]
    fan_in_names = np.array([name + " (parameter-server fan-in)" for name in cat.link_names] + [None], object)
    fan_in = breakdown.comm.ps_fan_in_bound
    network_label = np.where(fan_in, fan_in_names[resolved.network_link_index], network)
    comm_link = np.where(breakdown.comm.network_s >= breakdown.comm.intra_node_s, network_label, intra)
    out = np.full(len(code), None, object)
    out[code == 0] = names[host][code == 0]
    out[code == 3] = comm_link[code == 3]
    out[~resolved.ok] = None
    return out
