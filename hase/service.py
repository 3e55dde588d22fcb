"""`hase serve`: the prediction service for schedulers (FastAPI on uvicorn; OpenAPI schema at /openapi.json, docs at
/docs).

  POST /v1/analyse   multipart `model` (an ONNX file) + form `target` (+ `pin_dims`, a JSON object {dim: size}
                     for a model with dynamic dims): the model analysed for the target's EP;
                     returns its analysis_id (cached for the process' life) and kernel count
  POST /v1/predict   JSON {target, analysis_id | record, load | prometheus: {url?, selector}, options, breakdown}
                     or multipart `model` (ONNX) + form fields target, load (JSON), selector, options (JSON)
  POST /v1/place     JSON {analysis_id | record, candidates: [{target, selector, name?}], prometheus?, options}:
                     reads each candidate GPU's load from Prometheus (by its label selector) and returns them ranked
                     by predicted latency, with p10-p90 (a candidate whose load cannot be read is listed last, with
                     its error)
  GET  /metrics      the service's own request counts and latencies (Prometheus text format)
  GET  /healthz      liveness, loaded predictors, cached analyses

Stateless apart from caches (predictors, analyses by id). A bad request gets a 4xx JSON error
{"error": "...", "field": "..."} naming the field; no request can stop the process.
"""
import argparse
import concurrent.futures
import json
import tempfile
import threading
import time
from pathlib import Path

from hase.utils.errors import HaseError

ANALYSES = {}          # analysis_id -> record (the process' cache; a restart forgets them)
_ANALYSES_LOCK = threading.Lock()
MAX_ANALYSES = 1024
MAX_UPLOAD = 2 << 30


CALIB, CALIB_AGE = "HASE_CALIB_HOST_INDEX_US", "HASE_CALIB_AGE_S"   # the node agent's calibration gauges
_TLS = threading.local()
_QUERIES = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="hase-prom")


def _prom_query(url: str, promql: str):
    """The first value of an instant query (None: no series), over a kept-alive connection per thread."""
    import requests
    s = getattr(_TLS, "session", None)
    if s is None:
        s = _TLS.session = requests.Session()
    try:
        r = s.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        res = r.json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError) as e:
        raise HaseError(f"Prometheus at {url} unreachable or failed ({type(e).__name__})")
    return float(res[0]["value"][1]) if res else None


def prometheus_load(pcfg: dict, fields: list, optional=()) -> dict:
    """inference.load_sources.load_from_prometheus, its queries sent at once: {field: value}; a required field
    without a query, a series or a number is an error naming it, an optional one is left out."""
    from hase.inference.load_sources import promql_of
    url = pcfg["url"].rstrip("/")
    for f in fields:
        if f not in pcfg["queries"]:
            raise HaseError(f"no Prometheus query configured for field '{f}' (inference/config.yaml prometheus.queries)")
    want = list(fields) + [f for f in optional if f in pcfg["queries"]]
    futs = {f: _QUERIES.submit(_prom_query, url, promql_of(pcfg, f, pcfg["queries"][f])) for f in want}
    out = {}
    for f, fut in futs.items():
        v = fut.result()
        if f in fields and v is None:
            raise HaseError(f"Prometheus at {url} has no series for '{f}' ({pcfg['queries'][f].format(selector=pcfg['selector'])})")
        if f in fields and v != v:
            raise HaseError(f"Prometheus at {url} returned NaN (not measured) for '{f}'")
        if v is not None and v == v:
            out[f] = v
    return out


class RequestError(Exception):
    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


def _field_of(msg: str, fields) -> str:
    for f in fields:
        if f in msg:
            return f
    return ""


def create_app(default_prometheus: str = "", default_target: str = "nvidia-h200"):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
    from pydantic import BaseModel, ConfigDict, Field

    from hase import __version__
    from hase.api import load_predictor, record_key

    registry = CollectorRegistry()
    requests_total = Counter("hase_requests", "requests served", ["endpoint", "code"], registry=registry)
    latency = Histogram("hase_request_seconds", "request latency", ["endpoint"], registry=registry,
                        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 10))
    app = FastAPI(title="Hase prediction service", version=__version__,
                  description="ONNX Runtime session.run latency on NVIDIA GPUs under the current load")

    class Prometheus(BaseModel):
        model_config = ConfigDict(extra="forbid")
        url: str = Field("", description="Prometheus base URL; '' = the server's --prometheus")
        selector: str = Field(..., description='label selector of the GPU, e.g. gpu="0",Hostname="node1"')

    class PredictBody(BaseModel):
        model_config = ConfigDict(extra="forbid")
        target: str = Field(default_target, description="nvidia-h200, nvidia-h100, or a CPU slug")
        analysis_id: str | None = Field(None, description="from POST /v1/analyse (or an earlier upload)")
        record: dict | None = Field(None, description="a phase 2 record for the target's EP")
        load: dict[str, float] | None = Field(None, description="{DCGM field: value}; none and no prometheus = idle")
        prometheus: Prometheus | None = None
        options: dict | None = Field(None, description="cudnn_conv_algo_search, io_binding, cpu_pinned")
        breakdown: bool = Field(True, description="include the per-node breakdown")

    class Candidate(BaseModel):
        model_config = ConfigDict(extra="forbid")
        target: str = Field(..., description="the GPU's kind: nvidia-h200 or nvidia-h100")
        selector: str = Field(..., description="its Prometheus label selector")
        name: str | None = Field(None, description="how to call it in the answer (default: the selector)")

    class PlaceBody(BaseModel):
        model_config = ConfigDict(extra="forbid")
        analysis_id: str | None = None
        record: dict | None = None
        candidates: list[Candidate] = Field(..., min_length=1, max_length=256)
        prometheus: str = Field("", description="Prometheus base URL; '' = the server's --prometheus")
        options: dict | None = None

    def error(status, field, message):
        # one line whatever a client sent: a field name or value may hold line breaks (echoed, escaped)
        one = lambda t: str(t).replace("\r", "\\r").replace("\n", "\\n")  # noqa: E731
        return JSONResponse({"error": one(message), "field": one(field)}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError):
        e = exc.errors()[0] if exc.errors() else {}
        loc = [str(x) for x in e.get("loc", ()) if x not in ("body", "query", "form")]
        field = ".".join(loc) or "body"
        return error(422, field, f"{field}: {e.get('msg', 'invalid')}")

    @app.exception_handler(RequestError)
    async def on_request_error(request: Request, exc: RequestError):
        return error(exc.status, exc.field, exc.message)

    @app.exception_handler(HaseError)
    async def on_hase_error(request: Request, exc: HaseError):
        msg = str(exc)
        return error(400, _field_of(msg, ("load", "options", "record", "model", "target", "selector")), msg)

    @app.exception_handler(Exception)
    async def on_other(request: Request, exc: Exception):   # nothing stops the process; the cause in one line
        return error(500, "", f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    known = ("/v1/predict", "/v1/place", "/v1/analyse", "/healthz", "/metrics")

    class Count:   # a plain ASGI middleware (BaseHTTPMiddleware costs ~1 ms a request)
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.app(scope, receive, send)
            t0, status = time.perf_counter(), [500]

            async def send_(msg):
                if msg["type"] == "http.response.start":
                    status[0] = msg["status"]
                await send(msg)
            try:
                await self.app(scope, receive, send_)
            finally:
                ep = scope["path"] if scope["path"] in known else "other"
                latency.labels(ep).observe(time.perf_counter() - t0)
                requests_total.labels(ep, str(status[0])).inc()
    app.add_middleware(Count)

    def predictor(target: str, field: str = "target"):
        try:
            return load_predictor(target)
        except HaseError as e:
            raise RequestError(404, field, f"{field}: {e}")

    def remember(record: dict) -> str:
        aid = record_key(record)
        with _ANALYSES_LOCK:
            if aid not in ANALYSES and len(ANALYSES) >= MAX_ANALYSES:
                ANALYSES.pop(next(iter(ANALYSES)))
            ANALYSES[aid] = dict(record, _hase_key=aid)
        return aid

    def the_record(analysis_id, record, p, field_prefix=""):
        if analysis_id:
            with _ANALYSES_LOCK:
                rec = ANALYSES.get(analysis_id)
            if rec is None:
                raise RequestError(404, field_prefix + "analysis_id", f"analysis_id '{analysis_id}' is not known here "
                                                                      f"(analyses are cached per process: upload again)")
        elif record is not None:
            if not isinstance(record, dict) or not isinstance(record.get("kernels"), list) or "device" not in record:
                raise RequestError(422, "record", "record: not a phase 2 record (needs 'kernels' and 'device')")
            from hase.graph_model.dag_critical_path import check_record
            try:
                check_record(record)
            except HaseError as e:
                raise RequestError(422, "record", str(e))
            rec = ANALYSES.get(record_key(record)) or ANALYSES[remember(record)]
        else:
            raise RequestError(422, "analysis_id", "analysis_id or record is required (or upload `model`)")
        if rec.get("device") != p.device:
            raise RequestError(422, "record", f"record: analysed for the {rec.get('device')} EP, target "
                                              f"{p.target} is {p.device}")
        return rec

    def form_pins(form) -> dict:
        """The upload's `pin_dims` form field: a JSON object {dynamic dim name: size > 0} ({} when absent)."""
        raw = form.get("pin_dims")
        if raw in (None, ""):
            return {}
        try:
            pins = json.loads(raw)
        except (TypeError, json.JSONDecodeError):
            raise RequestError(422, "pin_dims", "pin_dims: not valid JSON (an object {dim name: size})")
        if not isinstance(pins, dict):
            raise RequestError(422, "pin_dims", "pin_dims: must be an object {dim name: size}")
        for k, v in pins.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise RequestError(422, f"pin_dims.{k}", f"pin_dims.{k}: must be a whole number > 0, not {v!r:.40}")
        return pins

    def analyse_upload(data: bytes, filename: str, p, pin_dims=None) -> dict:
        if not data:
            raise RequestError(422, "model", "model: empty upload")
        import onnx
        try:
            onnx.load_model_from_string(data)
        except Exception:
            raise RequestError(415, "model", f"model: '{filename}' is not an ONNX model")
        with tempfile.TemporaryDirectory(prefix="hase_up_") as d:
            path = Path(d) / (Path(filename or "model.onnx").stem + ".onnx")
            path.write_bytes(data)
            try:
                rec = p.analyse(path, pin_dims=pin_dims or {})
            except HaseError as e:
                status = 501 if "CUDA" in str(e) else 422
                msg = e.worded("service").cause   # unpinned dims: the form field pin_dims, not --set
                raise RequestError(status, "model", f"model: {msg}")
        return dict(rec, source_model=filename, optimized_model=None)

    def load_of(p, body_load, prom, field="load"):
        """(load or None, calibration or None)."""
        if body_load is not None and prom is not None:
            raise RequestError(422, "prometheus", "give load or prometheus, not both")
        if prom is not None:
            return prom_load(p, prom.url or default_prometheus, prom.selector, "prometheus")
        if body_load is not None:
            try:
                return (*p.check_load(body_load, field), "given"), None
            except HaseError as e:
                raise RequestError(422, field, str(e))
        return None, None

    def prom_load(p, url, selector, field):
        """(the checked load, the node's calibration or None): one batch of queries for the GPU's selector; the node
        agent's hase_calib_* gauges, where it exports them, scale the host side to that machine (issue 23)."""
        from hase.inference.load_sources import AGE, TS, WAIT
        if not url:
            raise RequestError(422, field, f"{field}: no Prometheus URL (give one, or start the server with "
                                           f"--prometheus)")
        pcfg = dict(p.cfg["prometheus"], url=url, selector=selector)
        try:
            got = prometheus_load(pcfg, p.fields, optional=(WAIT, AGE, TS, CALIB, CALIB_AGE))
            cal = None
            if CALIB in got:
                age = got.get(CALIB_AGE)
                cal = {"host_index_us": got[CALIB], "time_unix": time.time() - age if age is not None else None}
            load = {k: v for k, v in got.items() if k not in (CALIB, CALIB_AGE)}
            return (*p.check_load(load, f"prometheus {{{selector}}}"), f"prometheus {url} {{{selector}}}"), cal
        except HaseError as e:
            raise RequestError(424, field, f"{field}: {e}")

    def answer(pred, aid, breakdown=True):
        d = {f: getattr(pred, f) for f in ("model", "target", "total_ms", "p10_ms", "p90_ms", "idle_ms", "breakdown",
                                           "warnings", "provenance", "details")}
        if not breakdown:
            d.pop("breakdown")
        d["analysis_id"] = aid
        return JSONResponse(d)   # a Response: FastAPI's own (slower) encoder is skipped

    @app.get("/healthz")
    def healthz():
        from hase import api
        with _ANALYSES_LOCK:
            n = len(ANALYSES)
        return {"status": "ok", "version": __version__, "predictors": sorted({k[0] for k in api._CACHE}),
                "analyses": n}

    @app.get("/metrics")
    def metrics():
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/analyse")
    async def analyse(request: Request):
        form = await _form(request)
        target = str(form.get("target") or default_target)
        p = predictor(target)
        up = form.get("model")
        if up is None or not hasattr(up, "read"):
            raise RequestError(422, "model", "model: an ONNX file upload (multipart field 'model') is required")
        rec = analyse_upload(await up.read(), up.filename, p, form_pins(form))
        aid = remember(rec)
        return {"analysis_id": aid, "target": p.target, "model": rec.get("model"), "kernels": len(rec["kernels"])}

    async def _form(request: Request):
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise RequestError(415, "model", "an upload must be multipart/form-data with the ONNX file as 'model'")
        return await request.form()

    @app.post("/v1/predict")
    async def predict(request: Request):
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("multipart/form-data"):
            form = await request.form()
            body = {}
            for k in ("target", "load", "options", "selector", "prometheus_url", "breakdown"):
                if form.get(k) not in (None, ""):
                    body[k] = form.get(k)
            for k in ("load", "options"):
                if k in body:
                    try:
                        body[k] = json.loads(body[k])
                    except json.JSONDecodeError:
                        raise RequestError(422, k, f"{k}: not valid JSON")
            if "selector" in body:
                body["prometheus"] = {"url": body.pop("prometheus_url", ""), "selector": body.pop("selector")}
            body.pop("prometheus_url", None)
            if "breakdown" in body:
                body["breakdown"] = str(body["breakdown"]).lower() in ("1", "true", "yes")
            try:
                req = PredictBody(**body)
            except Exception as e:   # pydantic's ValidationError: name the field
                errs = getattr(e, "errors", lambda: [])()
                f = ".".join(str(x) for x in errs[0]["loc"]) if errs else "body"
                raise RequestError(422, f, f"{f}: {errs[0]['msg'] if errs else e}")
            p = predictor(req.target)
            up = form.get("model")
            if up is None or not hasattr(up, "read"):
                raise RequestError(422, "model", "model: an ONNX file upload (multipart field 'model') is required")
            data = await up.read()
            import anyio
            rec = await anyio.to_thread.run_sync(analyse_upload, data, up.filename, p, form_pins(form))
            aid = remember(rec)
            rec = ANALYSES[aid]
        else:
            try:
                raw = await request.json()
            except Exception:
                raise RequestError(400, "body", "body: not valid JSON (or upload the model as multipart/form-data)")
            if not isinstance(raw, dict):
                raise RequestError(422, "body", "body: must be a JSON object")
            try:
                req = PredictBody(**raw)
            except Exception as e:
                errs = getattr(e, "errors", lambda: [])()
                f = ".".join(str(x) for x in errs[0]["loc"]) if errs else "body"
                raise RequestError(422, f, f"{f}: {errs[0]['msg'] if errs else e}")
            p = predictor(req.target)
            rec = the_record(req.analysis_id, req.record, p)
            aid = rec.get("_hase_key") or remember(rec)
        import anyio
        load, cal = await anyio.to_thread.run_sync(load_of, p, req.load, req.prometheus)
        try:
            pred = await anyio.to_thread.run_sync(lambda: p.predict(rec, load, req.options, calibration=cal))
        except HaseError as e:
            msg = str(e)
            raise RequestError(422, _field_of(msg, ("options", "load", "record")) or "body", msg)
        return answer(pred, aid, req.breakdown)

    @app.post("/v1/place")
    def place(req: PlaceBody):
        url = req.prometheus or default_prometheus
        if not url:
            raise RequestError(422, "prometheus", "prometheus: no Prometheus URL (give one, or start the server with "
                                                  "--prometheus)")
        preds = {}
        for i, c in enumerate(req.candidates):
            if c.target not in preds:
                preds[c.target] = predictor(c.target, f"candidates.{i}.target")
        first = preds[req.candidates[0].target]
        rec = the_record(req.analysis_id, req.record, first)
        aid = rec.get("_hase_key") or remember(rec)
        for i, c in enumerate(req.candidates):
            if preds[c.target].device != rec.get("device"):
                raise RequestError(422, f"candidates.{i}.target", f"candidates.{i}.target: {c.target} runs the "
                                                                   f"{preds[c.target].device} EP, the record is for {rec.get('device')}")

        def one(c):
            p = preds[c.target]
            name = c.name or c.selector
            try:
                load, cal = prom_load(p, url, c.selector, "prometheus")
                r = p.predict(rec, load, req.options, calibration=cal)
                return {"name": name, "target": c.target, "selector": c.selector, "total_ms": r.total_ms,
                        "p10_ms": r.p10_ms, "p90_ms": r.p90_ms, "idle_ms": r.idle_ms,
                        "neighbour_busy": r.details.get("neighbour_busy"), "load": r.details.get("load"),
                        "host_scale": r.details.get("host_scale"),
                        "copy_scales": r.details.get("copy_scales"), "warnings": r.warnings}
            except (RequestError, HaseError) as e:
                return {"name": name, "target": c.target, "selector": c.selector, "error": getattr(e, "message", str(e))}
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(req.candidates))) as ex:
            ranked = list(ex.map(one, req.candidates))
        ranked.sort(key=lambda r: (0, r["total_ms"]) if "total_ms" in r else (1, 0.0))
        return {"analysis_id": aid, "model": rec.get("model"), "ranked": ranked,
                "best": ranked[0]["name"] if "total_ms" in ranked[0] else None}

    return app


def main() -> int:
    p = argparse.ArgumentParser(prog="hase serve", description="Hase prediction service (FastAPI on uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--prometheus", default="", help="default Prometheus URL for /v1/place and prometheus selectors")
    p.add_argument("--target", default="nvidia-h200", help="default target of /v1/predict")
    p.add_argument("--preload", action="append", default=[], metavar="TARGET",
                   help="load this target's predictor at start (repeatable); others load on first use")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--log-level", default="warning")
    args = p.parse_args()
    try:
        import uvicorn
    except ImportError:
        raise HaseError("hase serve needs fastapi and uvicorn: pip install 'hase[serve]'")
    from hase.api import load_predictor
    for t in args.preload:
        load_predictor(t)
    app = create_app(args.prometheus, args.target)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, workers=1)
    return 0
