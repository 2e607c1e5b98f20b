/**
 * An SVG picture of a memory plan: x is the step (node index over all graphs), y the byte
 * offset, one rectangle per planned tensor from its first to its last use, named where it is
 * wide and tall enough to hold its name (every rectangle names its tensor, op, offset, size and
 * steps on hover). Overlaps in x and y would be bugs; gaps show fragmentation; the dashed lines
 * mark the lower bound and the peak. Axes carry ticks in steps and bytes; a legend gives each
 * op's colour and the lines' meaning. Works for any plan: the demo block, a model's one-token
 * graph (`deno task plan:svg --model PATH`), a random DAG.
 * @module
 */

import { type OpCode, opName } from "../op.ts";
import type { MemoryPlan } from "../alloc/planner.ts";
import { formatBytes } from "./graph_dot.ts";

/** Options of {@link planToSvg}. */
export interface SvgOptions {
  /** Drawing width in pixels (default 1200). */
  width?: number;
  /** Drawing height in pixels (default 600). */
  height?: number;
  /** A title line. */
  title?: string;
}

/** Room for the title, the axes' ticks and labels, and the legend column on the right. */
const MARGIN = { left: 90, right: 190, top: 40, bottom: 50 } as const;
/** Pixels a character of the 11 px monospace font takes, to decide whether a name fits. */
const CHAR_WIDTH = 6.6;
/** Ticks per axis (about; they land on round numbers). */
const TICKS = 8;
/** Legend rows past this many ops are summed up in one "+N more" row. */
const LEGEND_OPS_MAX = 24;

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(
    /"/g,
    "&quot;",
  );
}

/** A stable colour per op, so one op's tensors read as one family. */
function opColor(op: OpCode): string {
  const hue = (op * 137.508) % 360;
  return `hsl(${hue.toFixed(0)},60%,62%)`;
}

/** Round tick values from 0 to `max`: steps of 1, 2 or 5 times a power of ten. */
function ticks(max: number): number[] {
  if (max <= 0) return [0];
  const raw = max / TICKS;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Math.round(v));
  return out;
}

/**
 * Draws `plan` as an SVG document.
 *
 * @example
 * ```ts
 * import { Context, Graph, mulMat, planGraph, planToSvg, silu } from "../../mod.ts";
 * const ctx = new Context();
 * const y = silu(mulMat(ctx.newTensor("f32", [64, 64]), ctx.newTensor("f32", [64, 8])));
 * const svg = planToSvg(planGraph(Graph.build(y)), { title: "mlp" });
 * console.log(svg.startsWith("<svg")); // true
 * ```
 */
export function planToSvg(plan: MemoryPlan, options: SvgOptions = {}): string {
  const width = options.width ?? 1200;
  const height = options.height ?? 600;
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const plotRight = MARGIN.left + plotW;
  const plotBottom = MARGIN.top + plotH;
  const steps = Math.max(1, plan.steps);
  const bytes = Math.max(1, plan.size);
  const x = (step: number): number => MARGIN.left + (step / steps) * plotW;
  const y = (offset: number): number => plotBottom - (offset / bytes) * plotH;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="monospace" font-size="11">`,
    `<style>rect.t{stroke:#333;stroke-width:0.3}rect.t:hover{stroke:#000;stroke-width:1.5}` +
    `text.name{font-size:9px;pointer-events:none}</style>`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#fff"/>`,
    `<text class="title" x="${MARGIN.left}" y="18">${
      escapeXml(options.title ?? "memory plan")
    } — ${plan.strategy}, size ${formatBytes(plan.size)}, lower bound ` +
    `${formatBytes(plan.lowerBound)}, naive ${formatBytes(plan.naiveSize)}, ` +
    `${plan.blocks.length} tensors</text>`,
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" ` +
    `fill="none" stroke="#999"/>`,
  ];

  // Axes: ticks on round steps and byte offsets, with their names.
  out.push('<g class="axis x">');
  for (const step of ticks(plan.steps)) {
    const at = x(step).toFixed(2);
    out.push(
      `<line x1="${at}" x2="${at}" y1="${plotBottom}" y2="${plotBottom + 4}" stroke="#666"/>`,
      `<text x="${at}" y="${plotBottom + 15}" text-anchor="middle">${step}</text>`,
    );
  }
  out.push(
    `<text x="${MARGIN.left + plotW / 2}" y="${height - 10}" text-anchor="middle">` +
      `step (node computed, in execution order)</text>`,
    "</g>",
    '<g class="axis y">',
  );
  for (const offset of ticks(plan.size)) {
    const at = y(offset).toFixed(2);
    out.push(
      `<line x1="${MARGIN.left - 4}" x2="${MARGIN.left}" y1="${at}" y2="${at}" stroke="#666"/>`,
      `<text x="${MARGIN.left - 6}" y="${at}" dy="3" text-anchor="end">${
        formatBytes(offset)
      }</text>`,
    );
  }
  out.push(
    `<text transform="translate(14 ${MARGIN.top + plotH / 2}) rotate(-90)" ` +
      `text-anchor="middle">offset in the buffer</text>`,
    "</g>",
  );

  // One rectangle per tensor, its name inside when it fits.
  const ops = new Map<OpCode, number>();
  for (const b of plan.blocks) {
    ops.set(b.tensor.op, (ops.get(b.tensor.op) ?? 0) + 1);
    const x0 = x(b.firstUse), x1 = x(b.lastUse + 1);
    const y0 = y(b.offset + b.size), y1 = y(b.offset);
    const w = Math.max(0.5, x1 - x0), h = Math.max(0.5, y1 - y0);
    const tip = `${b.tensor.label} ${opName(b.tensor.op)} @${b.offset} ${formatBytes(b.size)}, ` +
      `steps ${b.firstUse}-${b.lastUse}${b.inPlaceOf ? `, in place of ${b.inPlaceOf.label}` : ""}`;
    out.push(
      `<rect class="t" x="${x0.toFixed(2)}" y="${y0.toFixed(2)}" width="${w.toFixed(2)}" ` +
        `height="${h.toFixed(2)}" fill="${opColor(b.tensor.op)}"><title>${
          escapeXml(tip)
        }</title></rect>`,
    );
    const name = b.tensor.name || `#${b.tensor.id}`;
    if (h >= 10 && w >= name.length * CHAR_WIDTH * 0.85 + 4) {
      out.push(
        `<text class="name" x="${(x0 + 2).toFixed(2)}" y="${
          (y0 + Math.min(h, 20) / 2 + 3).toFixed(2)
        }">${escapeXml(name)}</text>`,
      );
    }
  }

  // The peak's label sits above its line and the bound's below, so they stay legible when equal.
  const line = (offset: number, label: string, color: string, dy: number): void => {
    const at = y(offset);
    out.push(
      `<line x1="${MARGIN.left}" x2="${plotRight}" y1="${at.toFixed(2)}" ` +
        `y2="${at.toFixed(2)}" stroke="${color}" stroke-dasharray="6 4"/>`,
      `<text x="${plotRight - 4}" y="${(at + dy).toFixed(2)}" fill="${color}" ` +
        `text-anchor="end">${escapeXml(label)}</text>`,
    );
  };
  line(plan.lowerBound, `lower bound ${formatBytes(plan.lowerBound)}`, "#c00", 12);
  line(plan.size, `peak ${formatBytes(plan.size)}`, "#06c", -3);

  // Legend: the lines, then each op's colour with its count of tensors, most first.
  const lx = plotRight + 16;
  let ly = MARGIN.top + 4;
  out.push('<g class="legend">', `<text x="${lx}" y="${ly + 4}" font-weight="bold">legend</text>`);
  ly += 18;
  for (const [label, color] of [["peak", "#06c"], ["lower bound", "#c00"]] as const) {
    out.push(
      `<line x1="${lx}" x2="${lx + 18}" y1="${ly}" y2="${ly}" stroke="${color}" ` +
        `stroke-dasharray="6 4"/>`,
      `<text x="${lx + 24}" y="${ly + 4}">${label}</text>`,
    );
    ly += 16;
  }
  const sorted = [...ops].sort((a, b) => b[1] - a[1] || a[0] - b[0]);
  for (const [op, count] of sorted.slice(0, LEGEND_OPS_MAX)) {
    out.push(
      `<rect class="key" x="${lx}" y="${ly - 8}" width="18" height="11" fill="${opColor(op)}" ` +
        `stroke="#333" stroke-width="0.3"/>`,
      `<text x="${lx + 24}" y="${ly + 2}">${escapeXml(opName(op))} ×${count}</text>`,
    );
    ly += 15;
  }
  if (sorted.length > LEGEND_OPS_MAX) {
    out.push(`<text x="${lx}" y="${ly + 2}">+${sorted.length - LEGEND_OPS_MAX} more ops</text>`);
  }
  out.push("</g>", "</svg>");
  return out.join("\n");
}
