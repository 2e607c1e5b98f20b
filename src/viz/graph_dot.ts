/**
 * A graph as Graphviz DOT text (ggml's `ggml_graph_dump_dot`): one box per node, an ellipse per
 * leaf, views dashed, outputs drawn bold, an edge from each source to its consumer. Callers can
 * fill tensors by group (their backend, say), box them into clusters (the splits of a
 * schedule) and label edges (the copies between backends). Render it with `dot -Tsvg`.
 * @module
 */

import type { Graph } from "../graph.ts";
import { opName } from "../op.ts";
import { formatShape, type Tensor } from "../tensor.ts";

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

function describe(tensor: Tensor): string {
  const name = tensor.name || `#${tensor.id}`;
  const op = tensor.src.length === 0 && !tensor.viewSource ? "" : `\n${opName(tensor.op)}`;
  return `${name}${op}\n${tensor.dtype} ${formatShape(tensor.ne)}`;
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
    const attrs = [`label=${quote(describe(tensor))}`, `shape=${leaf ? "ellipse" : "box"}`];
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
