// Charts of the llmsurge HTML report, drawn with uPlot from the chart descriptions
// embedded in the page (`charts`: title, axes, series; the same ones llmsurge draws its
// PNG and SVG images from), and the SLO table from the report. Every field is read
// defensively: a report may have any number of benchmarks, metrics with no values, and
// fields this script does not know yet (or, from an older llmsurge, fields missing). When done, <body> carries data-charts-expected and
// data-charts-rendered, and of those the server's charts in data-server-charts-expected
// and data-server-charts-rendered; window.llmsurgeTicks holds the tick labels each axis
// last drew, and of the x axes where each label sits and how wide it is (the headless
// check in scripts/check-html.sh reads them all).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var report = data.report || {};
  var labels = data.labels || [];
  var benches = Array.isArray(report.benchmarks) ? report.benchmarks : [];
  var expected = 0;
  var rendered = 0;
  // Of those, the server's charts (the headless check counts them apart: a report has
  // them only when it carries server metrics).
  var serverExpected = 0;
  var serverRendered = 0;

  // Per axis of every chart: {chart, axis, labels} with the tick labels it last drew.
  var ticksDrawn = [];
  var measure = document.createElement("canvas").getContext("2d");
  window.llmsurgeTicks = ticksDrawn;

  function label(i) { return labels[i] || ("benchmark " + (i + 1)); }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }

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
      // The horizontal axis: where each label is centred and how wide it is, so the
      // headless check can tell overlapping labels apart.
      if (axis === 0) {
        var a = u.axes[axisIdx] || {};
        var f = Array.isArray(a.font) ? a.font[0] : a.font;
        measure.font = typeof f === "string" ? f : "12px sans-serif";
        drawn.boxes = splits.map(function (v, k) {
          return { pos: u.valToPos(v, a.scale || "x"), width: measure.measureText(drawn.labels[k] || "").width };
        });
      }
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
      var u = new uPlot(opts, columns, box);
      rendered++;
      if (isServer) { serverRendered++; }
      return u;
    } catch (e) {
      console.error("chart '" + title + "' failed: " + e);
      var p = document.createElement("p");
      p.className = "nodata";
      p.textContent = "This chart could not be drawn: " + e;
      box.appendChild(p);
    }
  }

  // Several [[x, y]] lists as uPlot columns on the union of their x values. A line
  // spans the x values only the others have (undefined, which uPlot skips) and breaks
  // at its own null points (the ends of benchmarks).
  function columnsOf(lists, extraXs) {
    var xs = (extraXs || []).slice();
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
  function axisLabel(a) { return a && a.unit ? a.name + " (" + a.unit + ")" : (a && a.name) || ""; }

  // Points marked with a note (a Pareto point's benchmark, a knee): a ring and the note.
  function drawMarks(u, marks) {
    if (!Array.isArray(marks) || !marks.length) { return; }
    var ctx = u.ctx;
    var px = window.devicePixelRatio || 1;
    ctx.save();
    ctx.font = (12 * px) + "px sans-serif";
    ctx.fillStyle = "#000";
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 2 * px;
    marks.forEach(function (m) {
      if (num(m.x) === null || num(m.y) === null) { return; }
      var x = u.valToPos(m.x, "x", true);
      var y = u.valToPos(m.y, "y", true);
      ctx.beginPath();
      ctx.arc(x, y, 7 * px, 0, 2 * Math.PI);
      ctx.stroke();
      // Left of its point in the right third of the plot, where it would leave the frame.
      var left = x > u.bbox.left + u.bbox.width * 2 / 3;
      ctx.textAlign = left ? "right" : "left";
      ctx.fillText(String(m.label || ""), left ? x - 9 * px : x + 9 * px, y - 9 * px);
    });
    ctx.restore();
  }

  // Error bars (a sweep's spread across --repeat runs): a vertical stroke, capped.
  function drawErrorBars(u, bars) {
    if (!Array.isArray(bars) || !bars.length) { return; }
    var ctx = u.ctx;
    var px = window.devicePixelRatio || 1;
    ctx.save();
    ctx.lineWidth = 1.5 * px;
    bars.forEach(function (b) {
      if (num(b.x) === null || num(b.low) === null || num(b.high) === null) { return; }
      var x = u.valToPos(b.x, "x", true);
      var lo = u.valToPos(b.low, "y", true);
      var hi = u.valToPos(b.high, "y", true);
      var cap = 4 * px;
      ctx.strokeStyle = typeof b.color === "string" ? b.color : "#000";
      ctx.beginPath();
      ctx.moveTo(x, lo); ctx.lineTo(x, hi);
      ctx.moveTo(x - cap, lo); ctx.lineTo(x + cap, lo);
      ctx.moveTo(x - cap, hi); ctx.lineTo(x + cap, hi);
      ctx.stroke();
    });
    ctx.restore();
  }

  // Horizontal bars (the request timeline): `[row, from, to, kind]`, each kind in its
  // colour, at least a pixel wide and as tall as a row allows; clipped to the plot.
  function drawBars(u, bars) {
    var items = Array.isArray(bars.items) ? bars.items : [];
    var ctx = u.ctx;
    var px = window.devicePixelRatio || 1;
    ctx.save();
    ctx.beginPath();
    ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
    ctx.clip();
    var h = Math.max(1, Math.abs(u.valToPos(1, "y", true) - u.valToPos(0, "y", true)) * 0.8);
    (bars.kinds || []).forEach(function (kind, k) {
      ctx.fillStyle = kind.color;
      items.forEach(function (b) {
        if (!Array.isArray(b) || b[3] !== k || num(b[0]) === null || num(b[1]) === null || num(b[2]) === null) { return; }
        var x0 = u.valToPos(b[1], "x", true);
        var x1 = u.valToPos(b[2], "x", true);
        ctx.fillRect(x0, u.valToPos(b[0], "y", true) - h / 2, Math.max(px, x1 - x0), h);
      });
    });
    ctx.restore();
  }
  // The legend of a bar chart: each kind's colour and label, under the plot.
  function barLegend(box, bars) {
    var div = document.createElement("div");
    div.className = "bar-legend";
    (bars.kinds || []).forEach(function (kind) {
      var item = document.createElement("span");
      var swatch = document.createElement("i");
      swatch.style.background = kind.color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(" " + kind.label));
      div.appendChild(item);
    });
    box.appendChild(div);
  }

  // Lines shown with a chart (a comparison's verdicts), under it.
  function chartNotes(box, notes) {
    if (!Array.isArray(notes) || !notes.length) { return; }
    var ul = document.createElement("ul");
    ul.className = "chart-notes";
    notes.forEach(function (n) {
      var li = document.createElement("li");
      li.textContent = String(n);
      if (/^regressed/.test(String(n))) { li.className = "fail"; }
      ul.appendChild(li);
    });
    box.appendChild(ul);
  }

  // Charts of one x group (the timeline and the load beside it) zoom and pan together:
  // drag to zoom (sideways: time; up or down: rows), the wheel zooms time around the
  // pointer, shift+wheel pans it, a double click zooms out.
  var groups = {};
  var syncing = false;
  function joinGroup(u, group) {
    if (!group) { return; }
    (groups[group] = groups[group] || []).push(u);
  }
  function followX(u, group) {
    if (!group || syncing) { return; }
    syncing = true;
    try {
      var min = u.scales.x.min;
      var max = u.scales.x.max;
      (groups[group] || []).forEach(function (o) {
        if (o !== u && (o.scales.x.min !== min || o.scales.x.max !== max)) { o.setScale("x", { min: min, max: max }); }
      });
    } finally { syncing = false; }
  }
  function wheelZoom(u) {
    u.over.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var min = u.scales.x.min;
      var max = u.scales.x.max;
      var span = max - min;
      if (!(span > 0)) { return; }
      var rect = u.over.getBoundingClientRect();
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        var d = (ev.shiftKey ? ev.deltaY : ev.deltaX) > 0 ? span * 0.1 : -span * 0.1;
        u.setScale("x", { min: min + d, max: max + d });
        return;
      }
      var at = u.posToVal(ev.clientX - rect.left, "x");
      var f = ev.deltaY < 0 ? 0.8 : 1.25;
      u.setScale("x", { min: at - (at - min) * f, max: at + (max - at) * f });
    }, { passive: false });
  }

  // Every chart the report describes (`charts`, built by llmsurge from the report: the
  // PNG and SVG images are drawn from the same descriptions), drawn with uPlot.
  function fromZero(c) {
    if (c.y_data_only) { return {}; }
    return { range: function (u, min, max) {
      if (min === null || max === null || min < 0) { return [min, max]; }
      return [0, max > 0 ? max * 1.05 : 1];
    } };
  }

  function drawCharts() {
    (Array.isArray(data.charts) ? data.charts : []).forEach(function (c) {
      if (!document.getElementById(c.section)) { return; }
      if (c.no_data) { noData(c.section, c.title, c.no_data); return; }
      var series = Array.isArray(c.series) ? c.series : [];
      var range = Array.isArray(c.x_range) && num(c.x_range[0]) !== null && num(c.x_range[1]) !== null ? c.x_range : null;
      var group = typeof c.x_group === "string" ? c.x_group : null;
      var hooks = { draw: [function (u) { drawMarks(u, c.marks); drawErrorBars(u, c.error_bars); }] };
      if (group) {
        hooks.setScale = [function (u, key) { if (key === "x") { followX(u, group); } }];
        hooks.ready = [function (u) { joinGroup(u, group); wheelZoom(u); }];
      }
      if (c.bars && typeof c.bars === "object") {
        var items = Array.isArray(c.bars.items) ? c.bars.items : [];
        var xs = [];
        var rows = [];
        items.forEach(function (b) {
          if (!Array.isArray(b)) { return; }
          if (num(b[1]) !== null) { xs.push(b[1]); }
          if (num(b[2]) !== null) { xs.push(b[2]); }
          if (num(b[0]) !== null) { rows.push(b[0]); }
        });
        var lo = range ? range[0] : Math.min.apply(null, xs);
        var hi = range ? range[1] : Math.max.apply(null, xs);
        var rlo = rows.length ? Math.min.apply(null, rows) - 0.5 : 0;
        var rhi = rows.length ? Math.max.apply(null, rows) + 0.5 : 1;
        hooks.draw.unshift(function (u) { drawBars(u, c.bars); });
        var u = chart(c.section, c.title, {
          height: 420,
          legend: { show: false },
          cursor: { drag: { x: true, y: true, uni: 40 } },
          scales: { x: { time: false }, y: {} },
          series: [{ label: axisLabel(c.x) }, { label: axisLabel(c.y), stroke: "rgba(0,0,0,0)", paths: function () { return null; }, points: { show: false } }],
          axes: [{ label: axisLabel(c.x) }, { label: axisLabel(c.y), scale: "y" }],
          hooks: hooks,
        }, [[lo, hi], [rlo, rhi]]);
        if (u) { barLegend(u.root.parentNode, c.bars); chartNotes(u.root.parentNode, c.notes); }
        return;
      }
      var names = {};
      (c.x_names || []).forEach(function (n) { names[n[0]] = n[1]; });
      var xLabels = Array.isArray(c.x_labels) ? c.x_labels : null;
      var columns = columnsOf(series.map(function (s) {
        return (s.points || []).filter(function (p) { return Array.isArray(p) && num(p[0]) !== null; });
      }), range);
      var xSeries = { label: c.x.unit || c.x.name };
      if (xLabels) {
        xSeries.value = function (u, v) { return v === null || v === undefined ? "–" : "p" + (xLabels[v] || v); };
      } else if (c.x_names) {
        xSeries.value = function (u, v) {
          return v === null || v === undefined ? "–" : (names[v] ? names[v] + " (" + (Math.round(v * 100) / 100) + ")" : v);
        };
      }
      var right = series.some(function (s) { return s.right; }) && c.y2;
      var xAxis = { label: axisLabel(c.x) };
      if (xLabels) {
        xAxis.splits = function () { return xLabels.map(function (l, k) { return k; }); };
        xAxis.values = function (u, splits) { return splits.map(function (v) { return xLabels[v] || ""; }); };
      }
      var axes = [xAxis, { label: axisLabel(c.y), scale: "y" }];
      if (right) { axes.push({ label: axisLabel(c.y2), scale: "y2", side: 1, grid: { show: false } }); }
      var drawn = chart(c.section, c.title, {
        // As the images: a quantity that cannot go below zero is shown from zero, so a
        // spread of half a percent does not fill the axis (y_data_only: the data's span).
        scales: { x: { time: false }, y: fromZero(c), y2: fromZero(c) },
        series: [xSeries].concat(series.map(function (s) {
          var o = { label: s.label, stroke: s.color, scale: s.right ? "y2" : "y", width: s.markers ? 2 : 1.5,
            spanGaps: false, points: { show: !!s.markers, size: 6 } };
          if (s.dashed) { o.dash = [6, 4]; }
          if (s.step) { o.paths = uPlot.paths.stepped({ align: 1 }); }
          if (s.line === false) { o.paths = function () { return null; }; o.points = { show: true, size: 9 }; }
          return o;
        })),
        axes: axes,
        hooks: hooks,
      }, columns);
      if (drawn) { chartNotes(drawn.root.parentNode, c.notes); }
    });
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
  drawCharts();
  document.body.setAttribute("data-charts-expected", String(expected));
  document.body.setAttribute("data-charts-rendered", String(rendered));
  document.body.setAttribute("data-server-charts-expected", String(serverExpected));
  document.body.setAttribute("data-server-charts-rendered", String(serverRendered));
})();
