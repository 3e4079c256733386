// ONNX Runtime side of bench/compare_ort.py: loads an ONNX model with the npm package
// onnxruntime-node (CPU execution provider, graph optimizations "all", sequential execution),
// runs it on one .npy input and prints one JSON line:
//   {"median_ms", "p10_ms", "p90_ms", "max_abs_err", "max_rel_err", "ort_version"}
// The errors compare the output with a golden .npy (omit --golden to skip).
//
//   node bench/ort_bench.mjs --ort-dir /work/.ort --model m.onnx --input x=in.npy \
//       [--golden out.npy] [--threads 2] [--iters 50] [--warmup 5]
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

function parseArgs(argv) {
  const a = { threads: 2, iters: 50, warmup: 5, inputs: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i], value = argv[i + 1];
    if (value === undefined) throw new Error(`${key} needs a value`);
    if (key === "--ort-dir") a.ortDir = value;
    else if (key === "--model") a.model = value;
    else if (key === "--input") a.inputs.push(value);
    else if (key === "--golden") a.golden = value;
    else if (key === "--threads") a.threads = Number(value);
    else if (key === "--iters") a.iters = Number(value);
    else if (key === "--warmup") a.warmup = Number(value);
    else throw new Error(`unknown argument ${key}`);
  }
  if (!a.ortDir || !a.model || a.inputs.length === 0) throw new Error("--ort-dir, --model and --input are required");
  return a;
}

// A little-endian float32 or int64 C-order .npy (version 1 to 3).
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString("latin1", 0, 6) !== "\x93NUMPY") throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString("latin1", start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  if (descr !== "<f4" && descr !== "<i8") throw new Error(`${file}: dtype ${descr}, only <f4 and <i8 are supported`);
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order is not supported`);
  const shape = (/'shape':\s*\(([^)]*)\)/.exec(header)?.[1] ?? "").split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  const body = buf.subarray(start + headerLen);
  const bytes = body.buffer.slice(body.byteOffset, body.byteOffset + body.length);
  const data = descr === "<f4" ? new Float32Array(bytes) : new BigInt64Array(bytes);
  if (data.length !== shape.reduce((x, y) => x * y, 1)) throw new Error(`${file}: ${data.length} elements for shape ${shape}`);
  return { shape, data, type: descr === "<f4" ? "float32" : "int64" };
}

function percentile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * (sorted.length - 1) + 0.5))];
}

const args = parseArgs(process.argv.slice(2));
const require = createRequire(path.join(path.resolve(args.ortDir), "node_modules", "x.js"));
let ort;
try {
  ort = require("onnxruntime-node");
} catch (e) {
  console.error(`onnxruntime-node is not installed under ${args.ortDir} ` +
                `(cd ${args.ortDir} && npm install --ignore-scripts onnxruntime-node): ${e.message.split("\n")[0]}`);
  process.exit(2);
}
const session = await ort.InferenceSession.create(args.model, {
  executionProviders: ["cpu"],
  graphOptimizationLevel: "all",
  executionMode: "sequential",
  intraOpNumThreads: args.threads,
  interOpNumThreads: 1,
});
const feeds = {};
for (const spec of args.inputs) {
  const eq = spec.indexOf("=");
  const { shape, data, type } = readNpy(spec.slice(eq + 1));
  feeds[spec.slice(0, eq)] = new ort.Tensor(type, data, shape);
}
let result;
for (let i = 0; i < args.warmup; ++i) result = await session.run(feeds);
const times = [];
for (let i = 0; i < args.iters; ++i) {
  const t0 = process.hrtime.bigint();
  result = await session.run(feeds);
  times.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
times.sort((x, y) => x - y);
const out = { median_ms: percentile(times, 0.5), p10_ms: percentile(times, 0.1), p90_ms: percentile(times, 0.9),
              ort_version: ort.env.versions?.common ?? "unknown" };
if (args.golden) {
  const want = readNpy(args.golden).data;
  const got = result[session.outputNames[0]].data;
  if (got.length !== want.length) throw new Error(`output has ${got.length} values, golden ${want.length}`);
  let abs = 0, rel = 0;
  for (let i = 0; i < got.length; ++i) {
    const d = Math.abs(got[i] - want[i]);
    abs = Math.max(abs, d);
    rel = Math.max(rel, d / Math.max(Math.abs(want[i]), 1e-6));
  }
  out.max_abs_err = abs;
  out.max_rel_err = rel;
}
console.log(JSON.stringify(out));
