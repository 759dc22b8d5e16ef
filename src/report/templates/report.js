// Charts of the llmsurge HTML report, drawn with uPlot from the report embedded in the
// page. Every field is read defensively: a report may have any number of benchmarks,
// metrics with no values, and fields this script does not know yet (or, from an older
// llmsurge, fields missing). When done, <body> carries data-charts-expected and
// data-charts-rendered, and of those the server's charts in data-server-charts-expected
// and data-server-charts-rendered; window.llmsurgeTicks holds the tick labels each axis
// last drew (the headless check in scripts/check-html.sh reads them all).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var report = data.report || {};
  var labels = data.labels || [];
  var benches = Array.isArray(report.benchmarks) ? report.benchmarks : [];
  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var PCTS = ["p0_1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p99_9"];
  var PCT_LABELS = ["0.1", "1", "5", "10", "25", "50", "75", "90", "95", "99", "99.9"];
  var expected = 0;
  var rendered = 0;
  // Of those, the server's charts (the headless check counts them apart: a report has
  // them only when it carries server metrics).
  var serverExpected = 0;
  var serverRendered = 0;

  // Per axis of every chart: {chart, axis, labels} with the tick labels it last drew.
  var ticksDrawn = [];
  window.llmsurgeTicks = ticksDrawn;

  function color(i) { return PALETTE[i % PALETTE.length]; }
  function label(i) { return labels[i] || ("benchmark " + (i + 1)); }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }

  // The distribution of `key` for `status` of benchmark b, when it has values.
  function dist(b, key, status) {
    var m = b && b.metrics && b.metrics[key];
    var d = m && m[status || "successful"];
    return d && d.count > 0 ? d : null;
  }
  function pct(b, key, p) {
    var d = dist(b, key);
    return d && d.percentiles ? num(d.percentiles[p]) : null;
  }
  function hasValue(ys) {
    return ys.some(function (s) { return s.some(function (v) { return v !== null; }); });
  }

  function card(containerId, title) {
    var box = document.createElement("div");
    box.className = "chart";
    var h = document.createElement("h3");
    h.textContent = title;
    box.appendChild(h);
    document.getElementById(containerId).appendChild(box);
    return box;
  }
  function noData(containerId, title, why) {
    var box = card(containerId, title);
    var p = document.createElement("p");
    p.className = "nodata";
    p.textContent = why;
    box.appendChild(p);
  }

  // Tick labels with just enough decimals to show every split exactly, so adjacent labels
  // always differ: uPlot's default keeps 3 decimals at most, and the TPOT axis of a fast
  // run read "0.001, 0.001, 0.001, 0, 0". `incr` is the tick step uPlot chose.
  function tickLabels(splits, incr) {
    var vals = splits.filter(function (v) { return num(v) !== null; });
    var step = num(incr);
    if (!(step > 0)) {
      step = Infinity;
      for (var k = 1; k < vals.length; k++) {
        var gap = Math.abs(vals[k] - vals[k - 1]);
        if (gap > 0 && gap < step) { step = gap; }
      }
      if (step === Infinity) { step = Math.abs(vals[0] || 1); }
    }
    var d = 0;
    while (d < 15 && vals.some(function (v) { return Math.abs(Number(v.toFixed(d)) - v) > step * 1e-6; })) { d++; }
    return splits.map(function (v) {
      // `|| 0` turns -0 into 0 (no "-0" label).
      return num(v) === null ? "" : (v || 0).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
    });
  }
  // The `values` of an axis: `own` (an axis's own labels) or tickLabels, recorded.
  function recordedTicks(title, axis, own) {
    var drawn = { chart: title, axis: axis, labels: [] };
    ticksDrawn.push(drawn);
    return function (u, splits, axisIdx, space, incr) {
      var labels = own ? own(u, splits, axisIdx, space, incr) : tickLabels(splits, incr);
      drawn.labels = labels.map(function (l) { return l === null || l === undefined ? "" : String(l); });
      return labels;
    };
  }

  function yAxisSize(u, values) {
    var longest = (values || []).reduce(function (m, v) { return Math.max(m, String(v).length); }, 0);
    return Math.max(50, 28 + 7 * longest);
  }

  // Draws one chart; a failure is logged (the headless check fails on console errors)
  // and shown in place of the chart.
  function chart(containerId, title, opts, columns) {
    var isServer = containerId === "charts-server";
    expected++;
    if (isServer) { serverExpected++; }
    var box = card(containerId, title);
    try {
      opts.width = Math.max(320, box.clientWidth - 16);
      opts.height = opts.height || 280;
      (opts.axes || []).forEach(function (a, k) {
        a.values = recordedTicks(title, k, a.values);
        // A y axis as wide as its longest label ("19.9975" needs more than uPlot's 50 px).
        if (k > 0 && a.size === undefined) { a.size = yAxisSize; }
      });
      new uPlot(opts, columns, box);
      rendered++;
      if (isServer) { serverRendered++; }
    } catch (e) {
      console.error("chart '" + title + "' failed: " + e);
      var p = document.createElement("p");
      p.className = "nodata";
      p.textContent = "This chart could not be drawn: " + e;
      box.appendChild(p);
    }
  }

  function line(label, stroke, extra) {
    var s = { label: label, stroke: stroke, width: 2, points: { show: true, size: 6 } };
    for (var k in extra || {}) { s[k] = extra[k]; }
    return s;
  }

  // Whether any benchmark reports `key` at all: embeddings and rerank have no TTFT, ITL
  // or TPOT (absent, not empty), so their charts are left out rather than shown empty.
  function reported(key) {
    return benches.some(function (b) { return !!(b.metrics && b.metrics[key]); });
  }

  // Latency against the achieved request rate, one point per benchmark.
  function loadCurves() {
    var order = benches.map(function (b, i) { return i; })
      .filter(function (i) { return num(benches[i].throughput && benches[i].throughput.requests_per_s) !== null; })
      .sort(function (a, c) { return benches[a].throughput.requests_per_s - benches[c].throughput.requests_per_s; });
    var metrics = [["ttft", "TTFT"], ["itl", "Inter-token latency"], ["request_latency", "End-to-end latency"]];
    metrics.forEach(function (m) {
      if (!reported(m[0])) { return; }
      var title = m[1] + " vs achieved request rate (ms)";
      var xs = order.map(function (i) { return benches[i].throughput.requests_per_s; });
      var ys = ["p50", "p90", "p99"].map(function (p) {
        return order.map(function (i) { return pct(benches[i], m[0], p); });
      });
      if (!hasValue(ys)) { noData("charts-load", title, "No successful request measured this metric."); return; }
      chart("charts-load", title, {
        scales: { x: { time: false } },
        series: [{ label: "req/s" }, line("p50", color(0)), line("p90", color(3)), line("p99", color(1))],
        axes: [{ label: "achieved requests/s" }, { label: "ms" }],
      }, [xs].concat(ys));
    });
  }

  // Achieved throughput against the offered load of each benchmark: its target rate
  // (constant, poisson, and a replay's mean trace rate), or what it achieved when it has
  // no rate target (synchronous, throughput and concurrent benchmarks offer whatever
  // they can).
  function throughput() {
    var title = "Throughput vs offered load";
    function achieved(b) { return num(b.throughput && b.throughput.requests_per_s); }
    function target(b) {
      var t = b.strategy && b.strategy.type;
      if (t === "replay" && !(b.strategy.rate > 0)) return null;
      return (t === "constant" || t === "poisson" || t === "replay") ? num(b.strategy.rate) : null;
    }
    var order = benches.map(function (b, i) { return i; })
      .filter(function (i) { return (target(benches[i]) !== null ? target(benches[i]) : achieved(benches[i])) !== null; });
    function offered(i) { var t = target(benches[i]); return t !== null ? t : achieved(benches[i]); }
    order.sort(function (a, c) { return offered(a) - offered(c); });
    if (!order.length) { noData("charts-throughput", title, "No benchmark measured a request rate."); return; }
    var xs = order.map(offered);
    var columns = [xs,
      order.map(function (i) { return achieved(benches[i]); }),
      order.map(function (i) { return num(benches[i].throughput && benches[i].throughput.output_tokens_per_s); })];
    var series = [{ label: "offered req/s", value: function (u, v, si, k) {
        return k === null || k === undefined ? "–" : label(order[k]) + " (" + (Math.round(v * 100) / 100) + ")";
      } },
      line("achieved req/s", color(0), { scale: "rps" }),
      line("output tok/s", color(2), { scale: "tok" })];
    var targets = order.map(function (i) { return target(benches[i]); });
    if (targets.some(function (t) { return t !== null; })) {
      series.push(line("target req/s", color(7), { scale: "rps", dash: [6, 4], width: 1 }));
      columns.push(targets);
    }
    chart("charts-throughput", title, {
      scales: { x: { time: false }, rps: {}, tok: {} },
      series: series,
      axes: [{ label: "offered requests/s (target rate, or achieved without one)" },
        { label: "requests/s", scale: "rps" },
        { label: "output tokens/s", scale: "tok", side: 1, grid: { show: false } }],
    }, columns);
  }

  // Each benchmark's percentile curve of one metric.
  function distributions() {
    var metrics = [["ttft", "TTFT"], ["itl", "Inter-token latency"], ["tpot", "Time per output token"],
      ["request_latency", "End-to-end latency"]];
    metrics.forEach(function (m) {
      if (!reported(m[0])) { return; }
      var title = m[1] + " by percentile (ms)";
      var xs = PCTS.map(function (p, k) { return k; });
      var shown = [];
      var ys = [];
      benches.forEach(function (b, i) {
        if (!dist(b, m[0])) { return; }
        shown.push(i);
        ys.push(PCTS.map(function (p) { return pct(b, m[0], p); }));
      });
      if (!ys.length) { noData("charts-distributions", title, "No successful request measured this metric."); return; }
      chart("charts-distributions", title, {
        scales: { x: { time: false } },
        series: [{ label: "percentile", value: function (u, v) { return v === null ? "–" : "p" + PCT_LABELS[v]; } }]
          .concat(shown.map(function (i) { return line(label(i), color(i), { points: { show: true, size: 4 } }); })),
        axes: [{
          label: "percentile",
          splits: function () { return xs; },
          values: function (u, splits) { return splits.map(function (v) { return PCT_LABELS[v] || ""; }); },
        }, { label: "ms" }],
      }, [xs].concat(ys));
    });
  }

  // Per-second series over the whole run, one colour per benchmark.
  function timeseries() {
    var starts = benches.map(function (b) { return num(b.start_time); }).filter(function (v) { return v !== null; });
    var run0 = starts.length ? Math.min.apply(null, starts) : 0;
    var points = [];
    benches.forEach(function (b, i) {
      (Array.isArray(b.timeseries) ? b.timeseries : []).forEach(function (p) {
        var t = num(p.t);
        if (t !== null) { points.push({ x: (num(b.start_time) || run0) - run0 + t, i: i, p: p }); }
      });
    });
    points.sort(function (a, c) { return a.x - c.x; });
    var present = [];
    points.forEach(function (e) { if (present.indexOf(e.i) < 0) { present.push(e.i); } });
    present.sort(function (a, c) { return a - c; });
    var metrics = [
      ["Concurrency (requests in flight)", "requests", function (p) { return num(p.concurrency); }],
      ["Request rate (completed per second)", "requests/s", function (p) { return num(p.completed); }],
    ];
    if (reported("ttft")) {
      metrics.push(["TTFT, mean per second (ms)", "ms", function (p) { return num(p.ttft_mean_ms); }]);
    }
    metrics.forEach(function (m) {
      var xs = points.map(function (e) { return e.x; });
      var ys = present.map(function (i) {
        return points.map(function (e) { return e.i === i ? m[2](e.p) : null; });
      });
      if (!hasValue(ys)) { noData("charts-timeseries", m[0], "No per-second data."); return; }
      chart("charts-timeseries", m[0], {
        scales: { x: { time: false } },
        series: [{ label: "s" }].concat(present.map(function (i) {
          return { label: label(i), stroke: color(i), width: 1.5, points: { show: false } };
        })),
        axes: [{ label: "seconds since the run started" }, { label: m[1] }],
      }, [xs].concat(ys));
    });
  }

  // The server's own metrics (`server_metrics`, scraped from its /metrics), on the time
  // axis of the "Over the run" charts: a scrape at `t` seconds since its benchmark's
  // start lands at that benchmark's offset in the run plus `t`, as the client's seconds
  // do. Each quantity is one line across the benchmarks (they run one after another).
  // Nothing is drawn for a report without server metrics.
  function server() {
    var withServer = benches.filter(function (b) { return b && b.server_metrics; });
    if (!withServer.length) { return; }
    var starts = benches.map(function (b) { return num(b.start_time); }).filter(function (v) { return v !== null; });
    var run0 = starts.length ? Math.min.apply(null, starts) : 0;
    function offset(b) { var s = num(b.start_time); return s === null ? 0 : s - run0; }
    // [[x, value], …] of one server series over every benchmark; `map` turns one
    // benchmark's points into values (null to skip).
    // After each benchmark's points a null point just past its last one: the line breaks
    // there instead of joining one benchmark's load to the next one's.
    function endBenchmark(out, from) {
      if (out.length > from) { out.push([out[out.length - 1][0] + 1e-6, null]); }
    }
    function serverPoints(name, map) {
      var out = [];
      benches.forEach(function (b) {
        var from = out.length;
        var sm = b && b.server_metrics;
        var pts = sm && sm.series && Array.isArray(sm.series[name]) ? sm.series[name] : [];
        var clean = pts.filter(function (p) { return Array.isArray(p) && num(p[0]) !== null && num(p[1]) !== null; });
        (map ? map(clean) : clean).forEach(function (p) {
          if (p && num(p[1]) !== null) { out.push([offset(b) + p[0], p[1]]); }
        });
        endBenchmark(out, from);
      });
      return out;
    }
    function clientPoints(pick) {
      var out = [];
      benches.forEach(function (b) {
        var from = out.length;
        (Array.isArray(b.timeseries) ? b.timeseries : []).forEach(function (p) {
          var t = num(p.t);
          var v = pick(p);
          if (t !== null && v !== null) { out.push([offset(b) + t, v]); }
        });
        endBenchmark(out, from);
      });
      return out;
    }
    // A counter as a rate between consecutive scrapes of one benchmark; a counter that
    // went down (the server restarted) gives no point.
    function perSecond(pts) {
      var out = [];
      for (var k = 1; k < pts.length; k++) {
        var dt = pts[k][0] - pts[k - 1][0];
        var dv = pts[k][1] - pts[k - 1][1];
        if (dt > 0 && dv >= 0) { out.push([pts[k][0], dv / dt]); }
      }
      return out;
    }
    // Several [[x, y]] lists as uPlot columns on the union of their x values. A line
    // spans the x values only the others have (undefined, which uPlot skips) and breaks
    // at its own null points (the ends of benchmarks).
    function columnsOf(lists) {
      var xs = [];
      lists.forEach(function (l) { l.forEach(function (p) { xs.push(p[0]); }); });
      xs.sort(function (a, c) { return a - c; });
      xs = xs.filter(function (x, k) { return k === 0 || x !== xs[k - 1]; });
      var at = {};
      xs.forEach(function (x, k) { at[x] = k; });
      return [xs].concat(lists.map(function (l) {
        var ys = xs.map(function () { return undefined; });
        l.forEach(function (p) { ys[at[p[0]]] = p[1]; });
        return ys;
      }));
    }
    function serverChart(title, unit, lines, why) {
      var shown = lines.filter(function (l) { return l.points.length; });
      var ys = shown.map(function (l) { return l.points.map(function (p) { return p[1]; }); });
      // Only the client's series is not enough: the chart is about the server.
      if (!shown.some(function (l) { return l.server; }) || !hasValue(ys)) { noData("charts-server", title, why); return; }
      chart("charts-server", title, {
        scales: { x: { time: false } },
        series: [{ label: "s" }].concat(shown.map(function (l) {
          return { label: l.label, stroke: l.color, width: l.server ? 2 : 1.5, dash: l.server ? undefined : [6, 4],
            spanGaps: false, points: { show: false } };
        })),
        axes: [{ label: "seconds since the run started" }, { label: unit }],
      }, columnsOf(shown.map(function (l) { return l.points; })));
    }
    serverChart("Server queue beside client concurrency (requests)", "requests", [
      { label: "server: waiting", color: color(1), server: true, points: serverPoints("num_requests_waiting") },
      { label: "server: running", color: color(0), server: true, points: serverPoints("num_requests_running") },
      { label: "client: in flight", color: color(7), server: false, points: clientPoints(function (p) { return num(p.concurrency); }) },
    ], "The server published no waiting or running requests.");
    serverChart("Server KV-cache use (%)", "%", [
      { label: "server: KV-cache use", color: color(4), server: true, points: serverPoints("kv_cache_usage_perc", function (pts) {
        return pts.map(function (p) { return [p[0], p[1] * 100]; });
      }) },
    ], "The server published no KV-cache use.");
    serverChart("Server generation tokens/s beside the client's output tokens/s", "tokens/s", [
      { label: "server: generation tokens/s", color: color(2), server: true, points: serverPoints("generation_tokens", perSecond) },
      { label: "client: output tokens/s", color: color(7), server: false, points: clientPoints(function (p) { return num(p.output_tokens_per_s); }) },
    ], "The server published no generation-token counter.");
  }

  // SLO verdicts, when the report carries them (`slo` on a benchmark: `passed` and
  // `checks`, each with its `name`, `measured` value and `passed`).
  function slo() {
    var rows = [];
    benches.forEach(function (b, i) { if (b && b.slo !== undefined && b.slo !== null) { rows.push([i, b.slo]); } });
    if (!rows.length) { return; }
    var body = document.getElementById("slo-body");
    var table = document.createElement("table");
    var head = table.insertRow();
    ["Benchmark", "Verdict", "Checks"].forEach(function (t) {
      var th = document.createElement("th"); th.textContent = t; head.appendChild(th);
    });
    function verdict(v) {
      var ok = v && (v.passed !== undefined ? v.passed : v.pass !== undefined ? v.pass : v.ok);
      // A check with too few requests to decide (or a verdict of only such checks).
      var undecided = ok === false && v && (v.inconclusive === true ||
        (Array.isArray(v.checks) && v.checks.length > 0 && v.checks.every(function (c) { return c.passed || c.inconclusive; }) &&
        v.checks.some(function (c) { return c.inconclusive === true; })));
      var span = document.createElement("span");
      span.className = ok === true ? "pass" : ok === false ? "fail" : "";
      span.textContent = ok === true ? "pass" : undecided ? "inconclusive" : ok === false ? "fail" : "–";
      return span;
    }
    rows.forEach(function (r) {
      var tr = table.insertRow();
      tr.insertCell().textContent = label(r[0]);
      tr.insertCell().appendChild(verdict(r[1]));
      var cell = tr.insertCell();
      var checks = Array.isArray(r[1].checks) ? r[1].checks : [];
      checks.forEach(function (c) {
        var div = document.createElement("div");
        div.appendChild(verdict(c));
        var name = c.name || c.metric || c.key || "";
        var measured = c.measured !== undefined ? c.measured : c.observed;
        var shown = typeof measured === "number" ? String(Math.round(measured * 1000) / 1000)
          : measured === null ? "not measured" : measured;
        div.appendChild(document.createTextNode(" " + name +
          (shown !== undefined ? " (measured " + shown + ")" : "") +
          (typeof c.reason === "string" ? ": " + c.reason : "")));
        cell.appendChild(div);
      });
    });
    body.appendChild(table);
    document.getElementById("slo").hidden = false;
  }

  slo();
  loadCurves();
  throughput();
  distributions();
  timeseries();
  server();
  document.body.setAttribute("data-charts-expected", String(expected));
  document.body.setAttribute("data-charts-rendered", String(rendered));
  document.body.setAttribute("data-server-charts-expected", String(serverExpected));
  document.body.setAttribute("data-server-charts-rendered", String(serverRendered));
})();
