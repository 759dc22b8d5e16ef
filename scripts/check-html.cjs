// Opens an llmsurge HTML report in headless Chromium and checks it like a reader would:
// no console error, no page error, no network request (the page must work offline),
// every chart drawn (a non-blank canvas per chart), no axis with two identical
// adjacent tick labels and no x axis whose labels overlap (the page records each axis's
// labels, and the x axes' label positions and widths, in window.llmsurgeTicks).
//
// usage: node check-html.cjs REPORT.html EXPECTED_CHARTS SCREENSHOT.png
// (EXPECTED_CHARTS: the client's charts, a number, or "any" to accept the page's own
// count. The server's charts, drawn when the report carries server metrics, come on top
// and must all be drawn too; "N:S" also demands exactly S of them, e.g. "11:3".)
"use strict";
const path = require("path");
const { chromium } = require(process.env.PLAYWRIGHT_CORE || "playwright-core");

async function main() {
  const [file, expectedArg, screenshot] = process.argv.slice(2);
  if (!file || !expectedArg) {
    throw new Error("usage: node check-html.cjs REPORT.html EXPECTED_CHARTS [SCREENSHOT.png]");
  }
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "assert") { problems.push(`console ${m.type()}: ${m.text()}`); }
    });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    const url = "file://" + path.resolve(file);
    await page.route("**/*", (route) => {
      const u = route.request().url();
      if (u === url) { return route.continue(); }
      problems.push(`network request (the page must be self-contained): ${u}`);
      return route.abort();
    });
    await page.goto(url, { waitUntil: "load" });
    await page.waitForFunction(() => document.body.hasAttribute("data-charts-rendered"), null, { timeout: 15000 });
    const r = await page.evaluate(() => {
      const canvases = Array.from(document.querySelectorAll(".chart canvas"));
      const painted = canvases.filter((c) => {
        if (!c.width || !c.height) { return false; }
        const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        for (let i = 3; i < px.length; i += 4) { if (px[i] !== 0) { return true; } }
        return false;
      }).length;
      return {
        expected: Number(document.body.dataset.chartsExpected),
        rendered: Number(document.body.dataset.chartsRendered),
        canvases: canvases.length,
        painted: painted,
        nodata: document.querySelectorAll(".nodata").length,
        serverExpected: Number(document.body.dataset.serverChartsExpected || 0),
        serverRendered: Number(document.body.dataset.serverChartsRendered || 0),
        serverCanvases: document.querySelectorAll("#charts-server .chart canvas").length,
        ticks: Array.isArray(window.llmsurgeTicks) ? window.llmsurgeTicks : null,
      };
    });
    if (screenshot) { await page.screenshot({ path: screenshot, fullPage: true }); }
    const [clientArg, serverArg] = expectedArg.split(":");
    if (serverArg !== undefined && r.serverExpected !== Number(serverArg)) {
      problems.push(`the page planned ${r.serverExpected} server charts, expected ${serverArg}`);
    }
    if (r.serverRendered !== r.serverExpected || r.serverCanvases !== r.serverExpected) {
      problems.push(`${r.serverRendered} of ${r.serverExpected} server charts rendered (${r.serverCanvases} canvases)`);
    }
    const want = clientArg === "any" ? r.expected : Number(clientArg) + r.serverExpected;
    if (r.expected !== want) { problems.push(`the page planned ${r.expected} charts, expected ${want}`); }
    if (r.rendered !== want) { problems.push(`${r.rendered} charts rendered, expected ${want}`); }
    if (r.canvases !== want) { problems.push(`${r.canvases} chart canvases, expected ${want}`); }
    if (r.painted !== want) { problems.push(`${r.painted} canvases have pixels, expected ${want}`); }
    // Every drawn chart has at least its x and y axes, each labelled, and no label repeats
    // its neighbour (rounding that hides the step makes a misleading axis).
    const axes = r.ticks || [];
    if (axes.length < 2 * r.rendered) {
      problems.push(`${axes.length} axes recorded their tick labels, expected at least ${2 * r.rendered}`);
    }
    for (const a of axes) {
      if (!a.labels.some((l) => l !== "")) { problems.push(`chart '${a.chart}' axis ${a.axis} drew no tick label`); }
      // Labels of the x axis side by side must not overlap (2 px apart at least).
      const boxes = (Array.isArray(a.boxes) ? a.boxes : [])
        .map((b, k) => ({ pos: b.pos, width: b.width, label: a.labels[k] }))
        .filter((b) => b.label !== "" && Number.isFinite(b.pos) && b.width > 0)
        .sort((x, y) => x.pos - y.pos);
      for (let k = 1; k < boxes.length; k++) {
        const gap = (boxes[k].pos - boxes[k].width / 2) - (boxes[k - 1].pos + boxes[k - 1].width / 2);
        if (gap < 2) {
          problems.push(`chart '${a.chart}' axis ${a.axis}: tick labels '${boxes[k - 1].label}' and '${boxes[k].label}' overlap`);
          break;
        }
      }
      for (let k = 1; k < a.labels.length; k++) {
        if (a.labels[k] !== "" && a.labels[k] === a.labels[k - 1]) {
          problems.push(`chart '${a.chart}' axis ${a.axis}: adjacent tick labels repeat: ${a.labels.join(", ")}`);
          break;
        }
      }
    }
    console.log(`${file}: ${r.painted}/${want} charts drawn (${r.serverRendered} of the server's), ${r.nodata} 'no data' notes, tick labels of ${axes.length} axes checked`);
  } finally {
    await browser.close();
  }
  if (problems.length) {
    for (const p of problems) { console.error(`FAIL ${file}: ${p}`); }
    process.exit(1);
  }
}

main().catch((e) => { console.error(`FAIL: ${e.stack || e}`); process.exit(1); });
