"""The compact graph format: templates of many cases as flat arrays in one .npz (the trace stage).

Per node: owning case and template, section/part of the template, name, kind, phase, collective axis/op
/bytes, and dependencies as a CSR of template-local indices. Per case: the pipeline descriptor (schedule,
pp, virtual stages, micro-batches); the pipeline DAG itself is a pure function of it and of the templates,
so it is rebuilt on load instead of stored (a GPT-1T step has ~10^5 pipeline nodes but ~100 template nodes).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rapidllm.graph.templates import Node, Template
from rapidllm.pipeline.io import write_npz

STR_FIELDS = ("section", "part", "name", "kind", "phase", "axis", "op")


def graphs_to_arrays(graphs: dict[str, tuple[list[Template], dict]]) -> dict[str, np.ndarray]:
    """{case_id: (templates, descriptor)} -> arrays; descriptor keys: schedule, pp, v, m."""
    cols: dict[str, list] = {k: [] for k in (*STR_FIELDS, "case", "template", "nbytes", "ndeps")}
    deps: list[int] = []
    ids, desc = [], {"schedule": [], "pp": [], "v": [], "m": []}
    t_index = 0
    for ci, (cid, (templates, d)) in enumerate(graphs.items()):
        ids.append(cid)
        for k in desc:
            desc[k].append(d.get(k, "" if k == "schedule" else 1))
        for t in templates:
            for n in t.nodes:
                for k, v in (("section", t.section), ("part", t.part), ("name", n.name), ("kind", n.kind),
                             ("phase", n.phase), ("axis", n.axis), ("op", n.op), ("case", ci),
                             ("template", t_index), ("nbytes", n.nbytes), ("ndeps", len(n.deps))):
                    cols[k].append(v)
                deps.extend(n.deps)
            t_index += 1
    out = {k: np.array(cols[k], dtype=str) for k in STR_FIELDS}
    out.update(case=np.array(cols["case"], np.int64), template=np.array(cols["template"], np.int64),
               nbytes=np.array(cols["nbytes"], np.float64), dep_ptr=np.concatenate([[0], np.cumsum(cols["ndeps"])]).astype(np.int64),
               dep_idx=np.array(deps, np.int64), case_ids=np.array(ids, dtype=str),
               schedule=np.array(desc["schedule"], dtype=str),
               **{k: np.array(desc[k], np.int64) for k in ("pp", "v", "m")})
    return out


def write_graphs(graphs: dict[str, tuple[list[Template], dict]], out: str | Path) -> None:
    write_npz(graphs_to_arrays(graphs), out)


def read_graphs(path: str | Path) -> dict[str, tuple[list[Template], dict]]:
    # every array read once: an NpzFile decompresses an array again on each z[key], which inside the node
    # loop made reading quadratic in the nodes of a shard (minutes for 1,000 inference cases)
    with np.load(path) as f:
        z = {k: f[k] for k in f.files}
    ids = [str(c) for c in z["case_ids"]]
    out: dict[str, tuple[list[Template], dict]] = {
        cid: ([], {"schedule": str(z["schedule"][i]), "pp": int(z["pp"][i]), "v": int(z["v"][i]), "m": int(z["m"][i])})
        for i, cid in enumerate(ids)}
    current, last_t = None, -1
    ptr, idx = z["dep_ptr"], z["dep_idx"]
    for i in range(len(z["name"])):
        if z["template"][i] != last_t:
            last_t = int(z["template"][i])
            current = Template(str(z["section"][i]), str(z["part"][i]))
            out[ids[int(z["case"][i])]][0].append(current)
        assert current is not None
        current.nodes.append(Node(str(z["name"][i]), str(z["kind"][i]), str(z["phase"][i]),
                                  tuple(int(d) for d in idx[ptr[i]:ptr[i + 1]]), str(z["axis"][i]),
                                  str(z["op"][i]), float(z["nbytes"][i])))
    return out
