# Session 46: the shipped CPU default (corpus trees) predicting the 37 models at 1 and at 2 intra-op threads, scaled
# by each of 5 one-shot calibrations per thread count (hase calibrate --device cpu --set threads=T, taken t1, t2,
# t1, ... 8 s apart on the idle VM), against the medians of the episodes passes; prints per calibration (MAPE,
# within 10%, median signed, conv GFLOP/s, host index).
import json, lzma, glob, numpy as np, pandas as pd, hase
recs = json.loads(lzma.decompress(open('benchmark/results/cpu-amd-epyc/unseen_vm/fresh_t2_s46/records.json.xz','rb').read()))
res = {}
for t in (1, 2):
    lab = pd.read_csv(f'benchmark/results/cpu-amd-epyc/episodes/threads_s46/t{t}/episodes.csv.xz').groupby('model').e2e_median_ms.median()
    p = hase.load_predictor("cpu")
    for f in sorted(glob.glob(f'benchmark/results/cpu-amd-epyc/episodes/threads_s46/calibrations/cal_t{t}_*.json')):
        cal = json.load(open(f))
        pred = np.array([p.predict(recs[m], calibration=cal).total_ms for m in lab.index])
        e = pred / lab.to_numpy() - 1
        res.setdefault(t, []).append((round(float(abs(e).mean() * 100), 1), round(float((abs(e) < .1).mean() * 100)), round(float(np.median(e) * 100), 1),
                                      round(cal['compute']['conv_gflops']), round(cal['host_index_us'], 3)))
for t, v in res.items():
    print(t, v, 'mean MAPE', round(np.mean([x[0] for x in v]), 1))
