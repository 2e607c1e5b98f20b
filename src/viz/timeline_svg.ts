/**
 * An SVG picture of a memory plan: x is the step (node index over all graphs), y the byte
 * offset, one rectangle per planned tensor from its first to its last use. Overlaps in x and y
 * would be bugs; gaps show fragmentation; the dashed lines mark the lower bound and the peak.
 * @module
 */

import { opName } from "../op.ts";
import type { MemoryPlan } from "../alloc/planner.ts";

/** Options of {@link planToSvg}. */
export interface SvgOptions {
  /** Drawing width in pixels (default 1200). */
  width?: number;
  /** Drawing height in pixels (default 600). */
  height?: number;
  /** A title line. */
  title?: string;
}

const MARGIN = { left: 90, right: 20, top: 40, bottom: 40 } as const;

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(
    /"/g,
    "&quot;",
  );
}

/** A stable colour per op, so one op's tensors read as one family. */
function opColor(op: number): string {
  const hue = (op * 137.508) % 360;
  return `hsl(${hue.toFixed(0)},60%,62%)`;
}

/**
 * Draws `plan` as an SVG document (hover a rectangle for the tensor, offset and steps).
 *
 * @example
 * ```ts
 * import { Context, Graph, silu, mulMat } from "../../mod.ts";
 * import { planGraph } from "../alloc/planner.ts";
 * import { planToSvg } from "./timeline_svg.ts";
 * const ctx = new Context();
 * const y = silu(mulMat(ctx.newTensor("f32", [64, 64]), ctx.newTensor("f32", [64, 8])));
 * const svg = planToSvg(planGraph(Graph.build(y)));
 * console.log(svg.startsWith("<svg")); // true
 * ```
 */
export function planToSvg(plan: MemoryPlan, options: SvgOptions = {}): string {
  const width = options.width ?? 1200;
  const height = options.height ?? 600;
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const steps = Math.max(1, plan.steps);
  const bytes = Math.max(1, plan.size);
  const x = (step: number): number => MARGIN.left + (step / steps) * plotW;
  const y = (offset: number): number => MARGIN.top + plotH - (offset / bytes) * plotH;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="monospace" font-size="11">`,
    `<style>rect.t{stroke:#333;stroke-width:0.3}rect.t:hover{stroke:#000;stroke-width:1.5}` +
    `</style>`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${MARGIN.left}" y="18">${
      escapeXml(options.title ?? "memory plan")
    } — ${plan.strategy}, ` +
    `size ${plan.size} B, lower bound ${plan.lowerBound} B, naive ${plan.naiveSize} B</text>`,
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" ` +
    `fill="none" stroke="#999"/>`,
  ];
  for (const b of plan.blocks) {
    const x0 = x(b.firstUse), x1 = x(b.lastUse + 1);
    const y0 = y(b.offset + b.size), y1 = y(b.offset);
    const tip = `${b.tensor.label} ${opName(b.tensor.op)} @${b.offset} ${b.size} B, steps ` +
      `${b.firstUse}-${b.lastUse}${b.inPlaceOf ? `, in place of ${b.inPlaceOf.label}` : ""}`;
    out.push(
      `<rect class="t" x="${x0.toFixed(2)}" y="${y0.toFixed(2)}" ` +
        `width="${Math.max(0.5, x1 - x0).toFixed(2)}" height="${
          Math.max(0.5, y1 - y0).toFixed(2)
        }" ` +
        `fill="${opColor(b.tensor.op)}"><title>${escapeXml(tip)}</title></rect>`,
    );
  }
  // The peak's label sits above its line and the bound's below, so they stay legible when equal.
  const line = (offset: number, label: string, color: string, dy: number): void => {
    const at = y(offset);
    out.push(
      `<line x1="${MARGIN.left}" x2="${width - MARGIN.right}" y1="${at.toFixed(2)}" ` +
        `y2="${at.toFixed(2)}" stroke="${color}" stroke-dasharray="6 4"/>`,
      `<text x="4" y="${(at + dy).toFixed(2)}" fill="${color}">${escapeXml(label)}</text>`,
    );
  };
  line(plan.lowerBound, `lower ${plan.lowerBound}`, "#c00", 12);
  line(plan.size, `peak ${plan.size}`, "#06c", -3);
  out.push(
    `<text x="${MARGIN.left}" y="${height - 12}">step 0</text>`,
    `<text x="${width - MARGIN.right - 90}" y="${height - 12}">step ${plan.steps}</text>`,
    `<text x="4" y="${MARGIN.top + plotH}">0</text>`,
    "</svg>",
  );
  return out.join("\n");
}
