/**
 * A graph as Graphviz DOT text (ggml's `ggml_graph_dump_dot`): one box per node, an ellipse per
 * leaf, views dashed, outputs drawn bold, an edge from each source to its consumer. Callers can
 * fill tensors by group (their backend, say), box them into clusters (the splits of a
 * schedule) and label edges (the copies between backends). Render it with `dot -Tsvg`.
 *
 * {@link toDot} does all of that for a graph or a schedule, with each tensor's size and, given a
 * memory plan, its offset and the in-place reuse edges.
 * @module
 */

import { Graph } from "../graph.ts";
import { opName } from "../op.ts";
import { formatShape, type Tensor } from "../tensor.ts";
import type { MemoryPlan } from "../alloc/planner.ts";
import type { Schedule } from "../sched/schedule.ts";
import type { Split } from "../sched/splits.ts";

/** A labelled box that some tensors are drawn inside. */
export interface DotCluster {
  /** Identifies the cluster; tensors with the same id share it. */
  id: string;
  /** The text shown on the box. */
  label: string;
}

/** Options of {@link graphToDot}. */
export interface DotOptions {
  /** A title over the drawing. */
  title?: string;
  /** The group a tensor is filled by (one colour per group, with a legend); none: white. */
  groupOf?: (tensor: Tensor) => string | undefined;
  /** The cluster a tensor is drawn in; none: outside every cluster. */
  clusterOf?: (tensor: Tensor) => DotCluster | undefined;
  /** A label for the edge from `source` to `consumer` (e.g. a copy between backends). */
  edgeLabel?: (source: Tensor, consumer: Tensor) => string | undefined;
  /** More lines under a tensor's name, op, dtype and shape (its size, its offset). */
  notesOf?: (tensor: Tensor) => readonly string[];
  /** Extra edges drawn dotted and unconstrained (not ranking the layout), e.g. memory reuse. */
  extraEdges?: readonly DotExtraEdge[];
}

/** An edge that is not a data dependency (see {@link DotOptions.extraEdges}). */
export interface DotExtraEdge {
  /** The tensor it starts at. */
  from: Tensor;
  /** The tensor it ends at. */
  to: Tensor;
  /** The text on the edge. */
  label: string;
  /** Its colour (default blue). */
  color?: string;
}

/** Light fills that keep black text readable; groups past the end reuse them in order. */
const PALETTE = [
  "#a6cee3",
  "#b2df8a",
  "#fdbf6f",
  "#cab2d6",
  "#fb9a99",
  "#ffff99",
  "#8dd3c7",
  "#d9d9d9",
] as const;

/** A DOT double-quoted string: backslashes and quotes escaped, newlines as `\n`. */
function quote(text: string): string {
  return `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`;
}

function nodeId(tensor: Tensor): string {
  return `t${tensor.id}`;
}

function describe(tensor: Tensor, notes: readonly string[]): string {
  const name = tensor.name || `#${tensor.id}`;
  const op = tensor.src.length === 0 && !tensor.viewSource ? "" : `\n${opName(tensor.op)}`;
  const more = notes.map((n) => `\n${n}`).join("");
  return `${name}${op}\n${tensor.dtype} ${formatShape(tensor.ne)}${more}`;
}

/**
 * The graph as DOT text.
 *
 * @example
 * ```ts
 * import { Context, Graph, graphToDot, mulMat, silu } from "../../mod.ts";
 * const ctx = new Context();
 * const w = ctx.newTensor("f32", [64, 64], "w");
 * const x = ctx.newTensor("f32", [64, 8], "x");
 * const dot = graphToDot(Graph.build(silu(mulMat(w, x))), { title: "mlp" });
 * console.log(dot.startsWith("digraph")); // true
 * ```
 */
export function graphToDot(graph: Graph, options: DotOptions = {}): string {
  const colors = new Map<string, string>();
  const colorOf = (group: string): string => {
    let color = colors.get(group);
    if (!color) colors.set(group, color = PALETTE[colors.size % PALETTE.length]!);
    return color;
  };
  const outputs = new Set(graph.outputs);
  const statement = (tensor: Tensor): string => {
    const leaf = tensor.src.length === 0 && !tensor.viewSource;
    const styles = [leaf ? "" : "rounded"];
    const attrs = [
      `label=${quote(describe(tensor, options.notesOf?.(tensor) ?? []))}`,
      `shape=${leaf ? "ellipse" : "box"}`,
    ];
    if (tensor.viewSource) styles.push("dashed");
    const group = options.groupOf?.(tensor);
    if (group !== undefined) {
      styles.push("filled");
      attrs.push(`fillcolor=${quote(colorOf(group))}`);
    }
    if (outputs.has(tensor)) attrs.push("penwidth=2.5");
    const style = styles.filter((s) => s !== "").join(",");
    if (style) attrs.push(`style=${quote(style)}`);
    return `${nodeId(tensor)} [${attrs.join(", ")}];`;
  };

  const lines = [
    "digraph graft {",
    '  graph [rankdir=TB, fontname="Helvetica"];',
    '  node [fontname="Helvetica", fontsize=10];',
    '  edge [fontname="Helvetica", fontsize=9];',
  ];
  if (options.title !== undefined) lines.push(`  label=${quote(options.title)};`, "  labelloc=t;");
  const clusters = new Map<string, { label: string; body: string[] }>();
  const loose: string[] = [];
  for (const tensor of [...graph.leafs, ...graph.nodes]) {
    const cluster = options.clusterOf?.(tensor);
    if (!cluster) {
      loose.push(statement(tensor));
      continue;
    }
    let entry = clusters.get(cluster.id);
    if (!entry) clusters.set(cluster.id, entry = { label: cluster.label, body: [] });
    entry.body.push(statement(tensor));
  }
  let index = 0;
  for (const { label, body } of clusters.values()) {
    lines.push(
      `  subgraph cluster_${index++} {`,
      `    label=${quote(label)};`,
      "    style=rounded;",
    );
    for (const line of body) lines.push(`    ${line}`);
    lines.push("  }");
  }
  for (const line of loose) lines.push(`  ${line}`);
  for (const node of graph.nodes) {
    node.src.forEach((source, i) => {
      const attrs: string[] = [];
      if (node.src.length > 1) attrs.push(`taillabel=${quote(String(i))}`);
      // A view (or cpy) shares this source's memory rather than reading it into its own.
      if (source === node.viewSource) attrs.push('style="dashed"');
      const label = options.edgeLabel?.(source, node);
      if (label !== undefined) attrs.push(`label=${quote(label)}`, 'color="#d62728"');
      const tail = attrs.length > 0 ? ` [${attrs.join(", ")}]` : "";
      lines.push(`  ${nodeId(source)} -> ${nodeId(node)}${tail};`);
    });
  }
  for (const edge of options.extraEdges ?? []) {
    const color = edge.color ?? "#1f77b4";
    lines.push(
      `  ${nodeId(edge.from)} -> ${nodeId(edge.to)} [label=${quote(edge.label)}, ` +
        `style="dotted", color=${quote(color)}, fontcolor=${quote(color)}, constraint=false];`,
    );
  }
  if (colors.size > 0) {
    lines.push("  subgraph cluster_legend {", '    label="groups";', "    style=dotted;");
    let key = 0;
    for (const [group, color] of colors) {
      lines.push(
        `    legend_${key++} [label=${quote(group)}, shape=box, style=filled, ` +
          `fillcolor=${quote(color)}];`,
      );
    }
    lines.push("  }");
  }
  lines.push("}");
  return lines.join("\n") + "\n";
}

/** Bytes as a short human-readable size: 512 B, 12.0 KiB, 3.25 MiB. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"] as const;
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

/** Options of {@link toDot}. */
export interface ToDotOptions {
  /** A title over the drawing (default: what is drawn, in words). */
  title?: string;
}

/**
 * A graph, or a schedule of one, as DOT text with everything Graft knows about where its
 * tensors live:
 *
 * - every tensor's size in bytes;
 * - tensors filled by backend: for a {@link Schedule} the backend each is assigned to, for a
 *   {@link Graph} the backend of the buffer each is placed in (unplaced tensors unfilled);
 * - a schedule's splits boxed as clusters, and the edges that cross between backends (the
 *   copies) in red with their size;
 * - given a memory plan (`planGraph` of the same graph, one buffer: meant for a graph on one
 *   backend): each planned tensor's offset and block, and a dotted blue "in place" edge from
 *   each tensor whose memory another overwrites in place (never between two backends).
 *
 * Render it with Graphviz: `dot -Tsvg graph.dot -o graph.svg` (`deno task graph:dot` does).
 *
 * @example
 * ```ts
 * import { add, Context, Graph, planGraph, silu, toDot } from "../../mod.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [1024], "x");
 * const graph = Graph.build(add(silu(silu(x)), x));
 * const dot = toDot(graph, planGraph(graph));
 * console.log(dot.includes("in place")); // true: the second silu overwrites the first
 * ```
 */
export function toDot(
  source: Graph | Schedule,
  plan?: MemoryPlan,
  options: ToDotOptions = {},
): string {
  const schedule = source instanceof Graph ? undefined : source;
  const graph = source instanceof Graph ? source : source.graph;
  const blocks = new Map(plan?.blocks.map((b) => [b.tensor, b]));
  const notesOf = (t: Tensor): string[] => {
    const notes = [formatBytes(t.nbytes)];
    const block = blocks.get(t);
    if (block) notes.push(`@${block.offset} (block ${block.block})`);
    return notes;
  };
  const backendOf = (t: Tensor): string | undefined =>
    schedule ? schedule.assignment.get(t)?.backend.name : t.placement?.buffer.backend.name;
  const extraEdges: DotExtraEdge[] = [];
  for (const block of plan?.blocks ?? []) {
    // Tensors on two backends never share memory, whatever a one-buffer plan of the whole
    // graph says: such a pair is a copy (drawn as one), not an in-place reuse.
    if (block.inPlaceOf && backendOf(block.inPlaceOf) === backendOf(block.tensor)) {
      extraEdges.push({ from: block.inPlaceOf, to: block.tensor, label: "in place" });
    }
  }
  const planTitle = plan
    ? `, memory plan ${formatBytes(plan.size)} (lower bound ${formatBytes(plan.lowerBound)})`
    : "";
  if (!schedule) {
    return graphToDot(graph, {
      title: options.title ??
        `${graph.nodes.length} nodes, ${graph.leafs.length} leafs${planTitle}`,
      groupOf: backendOf,
      notesOf,
      extraEdges,
    });
  }
  const splitOf = new Map<Tensor, Split>();
  for (const split of schedule.splits) for (const local of split.nodes) splitOf.set(local, split);
  const backends = [...new Set(schedule.splits.map((s) => s.backend.name))].join(", ");
  return graphToDot(graph, {
    title: options.title ?? `${schedule.splits.length} splits over ${backends}${planTitle}`,
    groupOf: backendOf,
    clusterOf: (t) => {
      // A view sits with the split that computes its memory; views of leafs with none.
      let local: Tensor | null = t.src.length === 0 ? null : schedule.result(t);
      while (local && !splitOf.has(local)) local = local.viewSource;
      const split = local && splitOf.get(local);
      return split
        ? { id: String(split.index), label: `split ${split.index} ${split.backend.name}` }
        : undefined;
    },
    edgeLabel: (from, to) =>
      backendOf(from) === backendOf(to) ? undefined : `copy ${formatBytes(from.nbytes)}`,
    notesOf,
    extraEdges,
  });
}
