"""Node GPU-time trees on log time against roofline ratio (node_model.GPU_TARGETS), on the H200 corpus's training
split as the installed fit reads it (no pooled H100 rows, to keep it short). Two tests, folds by architecture:
  size: trees fitted on the nodes of models at batch <= 8, scored on held-out architectures' models at batch >= 32
        (a size no tree saw for that architecture);
  all:  trees fitted on every batch, scored on held-out architectures' models at every batch.
The score is per model: the sum of its nodes' predicted GPU time against the sum measured (CUPTI, medians).
  python inference/results/nvidia-h200/compare_roofline_target/run.py   (~25 min on 2 cores)
"""
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

from hase.inference import node_model as nmod
from hase.inference.fit_corpus_timeline import DEFAULTS, training_archs, training_data, training_rows
from hase.inference.fit_corpus_timeline import node_medians
from hase.model_zoo.corpus import load_split
from hase.utils import paths
from hase.utils.logger import get_logger

OUT = Path(__file__).parent
log = get_logger("inference")
cfg = dict(DEFAULTS, timeline_dirs=["benchmark/results/nvidia-h200/corpus/machine_*"],
           join_exams=[f"model_zoo/corpus_split{v}.yaml" for v in ("", "_v13", "_v14", "_v15", "_v16", "_v17")])
train_archs = training_archs(load_split(), cfg["join_exams"])
sessions, nodes, train, dirs, clean, records = training_data(cfg, train_archs, log)
ks, g, _, owner = training_rows(train, records, node_medians(nodes, 0.0))
steps = np.array([nmod.recurrent_steps(k) for k in ks], float)
one = [nmod.one_step(k) for k in ks]
X, _ = nmod.features(one, nmod.type_vocabulary([k["type"] for k in ks]))
x = X.to_numpy(np.float32)
base = nmod.roofline_us(one)
arch = np.array([paths.model_arch(m) for m in owner])
batch = np.array([int(m.split("_bs")[1].split("_")[0]) for m in owner])
uniq = sorted(set(arch))
fold = dict(zip(uniq, np.random.default_rng(0).permutation(len(uniq)) % 2))
fo = np.array([fold[a] for a in arch])
log.info("%d nodes of %d models, %d architectures", len(ks), len(set(owner)), len(uniq))
rows = []
for test in ("size", "all"):
    for f in (0, 1):
        tr = (fo != f) & ((batch <= 8) if test == "size" else True)
        te = (fo == f) & ((batch >= 32) if test == "size" else True)
        for kind in nmod.GPU_TARGETS:
            y = nmod.gpu_target(g, steps, base, kind)
            m = xgb.XGBRegressor(**nmod.PARAMS).fit(x[tr], y[tr])
            p = nmod.gpu_from_target(m.predict(x[te]), base[te], kind) * steps[te]
            d = pd.DataFrame({"model": owner[te], "pred": p, "meas": g[te]}).groupby("model").sum()
            for mdl, r in d.iterrows():
                rows.append({"test": test, "fold": f, "target": kind, "model": mdl, "pred_gpu_us": r.pred,
                             "meas_gpu_us": r.meas})
            e = (d.pred / d.meas - 1).abs().mean() * 100
            log.info("%s fold %d %s: %d models, GPU-sum MAPE %.2f%%", test, f, kind, len(d), e)
c = pd.DataFrame(rows)
c.to_csv(OUT / "cases.csv.tmp", index=False, compression="xz")
Path(OUT / "cases.csv.tmp").rename(OUT / "cases.csv.xz")
