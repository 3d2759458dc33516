// End-to-end test of the proxy's /dashboard in headless Chromium.
//
//   node dashboard.mjs --tidegate PATH --chromium PATH --out DIR
//
// Starts a slow origin (Python, 100 ms per request), `tidegate proxy` in front of it with a
// fixed limit of 4 in flight (capacity 40 req/s, so overload is certain), opens the dashboard,
// drives `tidegate load` at 10 req/s and then at 200 req/s, and checks in the page that the
// charts draw, that nothing is rejected under the light load and that rejections (by reason
// and by tier), a full limit and a longer queue show up under the overload; then that the
// page fits a narrow screen, loads nothing from elsewhere, and says plainly when the proxy is
// gone. Screenshots go to DIR (dashboard.png at 1280x800, dashboard-narrow.png,
// dashboard-unreachable.png). Every wait is bounded; any failed check exits 1.

import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) =>
    arg.startsWith("--") ? [...pairs, [arg.slice(2), all[i + 1]]] : pairs, []));
const tidegate = resolve(args.tidegate ?? "target/debug/tidegate");
const executablePath = args.chromium ?? "/usr/bin/chromium";
const out = resolve(args.out ?? "target/e2e");
mkdirSync(out, { recursive: true });

const children = [];
const work = mkdtempSync(join(tmpdir(), "tidegate-e2e-"));
let browser;

function log(message) {
  console.log(`[e2e ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);
}
const started = Date.now();

function fail(message) {
  throw new Error(message);
}

// Starts a process; resolves with it and the first line of its output matching `ready`.
function start(name, command, argv, ready) {
  const child = spawn(command, argv, { stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  const lines = [];
  return new Promise((resolveStart, rejectStart) => {
    const timer = setTimeout(
      () => rejectStart(new Error(`${name} did not start within 15 s:\n${lines.join("\n")}`)),
      15000);
    const watch = stream => createInterface({ input: stream }).on("line", line => {
      lines.push(line);
      const match = ready && line.match(ready);
      if (match) { clearTimeout(timer); resolveStart({ child, match, lines }); }
    });
    watch(child.stdout);
    watch(child.stderr);
    child.on("exit", code => {
      clearTimeout(timer);
      rejectStart(new Error(`${name} exited (${code}) before it was ready:\n${lines.join("\n")}`));
    });
    if (!ready) { clearTimeout(timer); resolveStart({ child, match: null, lines }); }
  });
}

function exited(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolveExit, rejectExit) => {
    const timer = setTimeout(() => rejectExit(new Error(`still running after ${ms} ms`)), ms);
    child.on("exit", code => { clearTimeout(timer); resolveExit(code); });
  });
}

const ORIGIN = `
import http.server, sys, time
class Slow(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        time.sleep(0.1)
        body = b"ok\\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
server = Server(("127.0.0.1", 0), Slow)
print("origin listening on", server.server_address[1], flush=True)
server.serve_forever()
`;

const PROXY_CONFIG = `
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
threads = 2

[client]
timeout = "2s"

[gate.limit]
algorithm = "fixed"
[gate.limit.fixed]
limit = 4

[gate.queue]
capacity = 20
timeout = "200ms"
`;

// The page's tile values, charts' drawn points and state, read in one go.
async function readPage(page) {
  return page.evaluate(() => {
    const tiles = {};
    for (const el of document.querySelectorAll("[id^=v-]")) {
      tiles[el.id.slice(2)] = el.dataset.value === "" ? null : Number(el.dataset.value);
    }
    const charts = {};
    for (const canvas of document.querySelectorAll("canvas")) {
      charts[canvas.id.replace("chart-", "")] = {
        points: Number(canvas.dataset.points),
        last: canvas.dataset.last ? JSON.parse(canvas.dataset.last) : null,
      };
    }
    return { state: document.body.dataset.state, seq: Number(document.body.dataset.seq || 0),
             tiles, charts, overflow: document.documentElement.scrollWidth - innerWidth };
  });
}

// Polls the page until `check` holds, up to `ms`; returns the reading that satisfied it.
async function waitFor(page, what, ms, check) {
  const deadline = Date.now() + ms;
  let reading;
  while (Date.now() < deadline) {
    reading = await readPage(page);
    if (check(reading)) { log(`ok: ${what}`); return reading; }
    await page.waitForTimeout(250);
  }
  fail(`timed out after ${ms} ms waiting for ${what}; the page showed ${JSON.stringify(reading)}`);
}

async function main() {
  const origin = await start("origin", "python3", ["-c", ORIGIN], /listening on (\d+)/);
  const originUrl = `http://127.0.0.1:${origin.match[1]}`;
  writeFileSync(join(work, "proxy.toml"), PROXY_CONFIG);
  const proxy = await start("tidegate proxy", tidegate,
    ["proxy", "--config", join(work, "proxy.toml"), "--upstream", originUrl],
    /listening on (\S+), admin on (\S+),/);
  const proxyUrl = `http://${proxy.match[1]}/`;
  const admin = `http://${proxy.match[2]}`;
  log(`origin ${originUrl}, proxy ${proxyUrl}, admin ${admin}`);

  browser = await chromium.launch({ executablePath, headless: true,
                                    args: ["--no-sandbox", "--disable-gpu"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const elsewhere = [];
  page.on("request", request => {
    if (!request.url().startsWith(admin + "/")) elsewhere.push(request.url());
  });
  const errors = [];
  page.on("pageerror", error => errors.push(String(error)));
  page.on("console", message => { if (message.type() === "error") errors.push(message.text()); });
  await page.goto(`${admin}/dashboard`);
  await waitFor(page, "the page to connect and draw its first samples", 10000,
    r => r.state === "live" && r.charts.throughput.points >= 2);

  // Light load: 10 req/s against a capacity of 40. Nothing may be rejected.
  const light = await start("light load", tidegate,
    ["load", proxyUrl, "--rate", "10", "--duration", "6s", "--tiers", "1:30,5:70",
     "--progress", "never"], null);
  const duringLight = [];
  const lightEnd = Date.now() + 6000;
  while (Date.now() < lightEnd) {
    duringLight.push(await readPage(page));
    await page.waitForTimeout(500);
  }
  await exited(light.child, 10000);
  const lightOffered = Math.max(...duringLight.map(r => r.tiles.offered ?? 0));
  const lightRejected = Math.max(...duringLight.map(r => r.tiles.rejected ?? 0));
  if (!(lightOffered >= 5)) fail(`light load: offered peaked at ${lightOffered} req/s, not ~10`);
  if (lightRejected !== 0) fail(`light load: ${lightRejected} req/s rejected, expected none`);
  log(`ok: light load seen (offered up to ${lightOffered.toFixed(1)} req/s), nothing rejected`);

  // Overload: 200 req/s, five times the capacity.
  const heavy = await start("overload", tidegate,
    ["load", proxyUrl, "--rate", "200", "--duration", "15s", "--tiers", "1:30,5:70",
     "--timeout", "2s", "--progress", "never"], null);
  const overloadFrom = (await readPage(page)).seq;
  const overloaded = await waitFor(page, "rejections under overload", 12000,
    r => r.tiles.rejected > 0 && r.tiles.offered > 100);
  const full = await waitFor(page, "the limit full, goodput near capacity and tier 5 shed", 12000,
    r => r.tiles.inflight >= 4 && r.tiles.goodput >= 20 &&
         r.charts.tiers.last && r.charts.tiers.last[5] > 0 &&
         r.charts.rejected.last && r.charts.rejected.last.some(v => v > 0));
  if (!(overloaded.tiles.offered > 5 * lightOffered / 2)) {
    fail(`offered did not move: ${lightOffered} then ${overloaded.tiles.offered} req/s`);
  }
  if (full.tiles.goodput > 60) fail(`goodput ${full.tiles.goodput} req/s above the capacity of 40`);
  for (const [name, chart] of Object.entries(full.charts)) {
    if (!(chart.points > 0)) fail(`chart ${name} drew no points`);
  }
  if (full.overflow > 0) fail(`the page is ${full.overflow}px wider than 1280`);
  // A few seconds of overload in the picture.
  await waitFor(page, "six samples into the overload", 12000, r => r.seq >= overloadFrom + 6);
  await page.screenshot({ path: join(out, "dashboard.png") });
  log(`ok: screenshot ${join(out, "dashboard.png")} (offered ${full.tiles.offered.toFixed(0)}, ` +
      `goodput ${full.tiles.goodput.toFixed(0)}, rejected ${full.tiles.rejected.toFixed(0)} req/s, ` +
      `in flight ${full.tiles.inflight}, reject ratio ${full.tiles.ratio})`);

  // A narrow screen: everything in one column, no sideways scrolling, charts still drawn.
  await page.setViewportSize({ width: 390, height: 844 });
  const narrow = await waitFor(page, "the narrow layout", 5000,
    r => r.overflow <= 0 && Object.values(r.charts).every(c => c.points > 0));
  const widths = await page.evaluate(() =>
    [...document.querySelectorAll("canvas")].map(c => c.getBoundingClientRect().right));
  if (Math.max(...widths) > 390) fail(`a chart sticks out of the narrow screen: ${widths}`);
  await page.screenshot({ path: join(out, "dashboard-narrow.png"), fullPage: true });
  log(`ok: narrow screenshot, seq ${narrow.seq}`);
  await page.setViewportSize({ width: 1280, height: 800 });

  heavy.child.kill("SIGTERM");
  await exited(heavy.child, 10000).catch(() => heavy.child.kill("SIGKILL"));

  // The proxy goes away: the page must say so.
  proxy.child.kill("SIGTERM");
  await exited(proxy.child, 15000);
  await waitFor(page, "the unreachable banner", 10000, r => r.state === "unreachable");
  const banner = await page.locator("#banner").innerText();
  if (!/unreachable/i.test(banner) || !(await page.locator("#banner").isVisible())) {
    fail(`the banner does not say the proxy is unreachable: ${JSON.stringify(banner)}`);
  }
  await page.screenshot({ path: join(out, "dashboard-unreachable.png") });
  log(`ok: banner "${banner}"`);

  if (elsewhere.length) fail(`the page requested other hosts: ${elsewhere.join(", ")}`);
  // Failed fetches while the proxy is down are expected console noise; nothing else is.
  const unexpected = errors.filter(e => !/Failed to load resource|ERR_CONNECTION_REFUSED/.test(e));
  if (unexpected.length) fail(`errors in the page: ${unexpected.join("; ")}`);
  log("PASS");
}

const guard = setTimeout(() => { console.error("e2e: over 120 s, giving up"); cleanup(); process.exit(1); },
                         120000);
function cleanup() {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
  rmSync(work, { recursive: true, force: true });
}

try {
  await main();
  process.exitCode = 0;
} catch (error) {
  console.error(`e2e: FAIL: ${error.message}`);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  cleanup();
  clearTimeout(guard);
}
