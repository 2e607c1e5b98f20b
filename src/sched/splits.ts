/**
 * Split construction: cut the assigned graph into maximal runs of work on one backend, and
 * rewrite each run over tensors that live on its backend. A source that lives elsewhere gets a
 * copy tensor of the same layout on the split's backend (one per tensor and backend, reused by
 * later splits); results that later splits need become outputs of their split, so the planner
 * keeps them alive.
 * @module
 */

import type { Backend } from "../backend/backend.ts";
import { Graph } from "../graph.ts";
import { isViewOp, Op } from "../op.ts";
import { Tensor } from "../tensor.ts";
import type { Assignment } from "./assign.ts";

/** A tensor a split needs from another backend, and its copy on the split's backend. */
export interface SplitInput {
  /** The tensor on the other backend (an input, or a result of an earlier split). */
  source: Tensor;
  /** The same-layout tensor on this split's backend that the source is copied into. */
  copy: Tensor;
  /** The backend the source lives on. */
  from: Backend;
}

/** A run of nodes computed by one backend. */
export interface Split {
  /** Position in execution order. */
  index: number;
  /** The backend that computes it. */
  backend: Backend;
  /** The split's own tensors, rewritten over local memory, in order. */
  nodes: Tensor[];
  /** Copies made before the split runs. */
  inputs: SplitInput[];
  /** The split's graph: its nodes; inputs, copies and earlier results as leafs. */
  graph: Graph;
}

/** The splits of a graph and where each original tensor's local version is. */
export interface SplitSet {
  /** The splits in execution order. */
  splits: Split[];
  /** Per backend: original tensor -> the tensor holding its value on that backend. */
  local: Map<Backend, Map<Tensor, Tensor>>;
  /** The split tensors that hold the graph's outputs (kept to the end by the planner). */
  finals: ReadonlySet<Tensor>;
}

interface Draft {
  backend: Backend;
  originals: Tensor[];
  nodes: Tensor[];
  inputs: SplitInput[];
}

class Builder {
  readonly local = new Map<Backend, Map<Tensor, Tensor>>();
  /** Work tensors (rewritten) -> the split that computes them. */
  readonly producer = new Map<Tensor, number>();
  /** Rewritten tensors some other split reads. */
  readonly exported = new Set<Tensor>();

  constructor(readonly assigned: Map<Tensor, Assignment>) {}

  map(backend: Backend): Map<Tensor, Tensor> {
    let m = this.local.get(backend);
    if (!m) this.local.set(backend, m = new Map());
    return m;
  }

  backendOf(t: Tensor): Backend {
    return this.assigned.get(t)!.backend;
  }

  /** The tensor that holds `t`'s value on `backend`, copying it there if it lives elsewhere. */
  resolve(t: Tensor, draft: Draft, index: number): Tensor {
    const here = this.map(draft.backend).get(t);
    if (here) {
      this.noteUse(here, index);
      return here;
    }
    const home = this.backendOf(t);
    if (home === draft.backend) {
      // Only leafs and views reach this point: work nodes on this backend are mapped when made.
      return this.materialize(t, home, (s) => this.resolve(s, draft, index));
    }
    const source = this.materialize(t, home, (s) => this.onHome(s, home));
    this.noteUse(source, index);
    const name = `${t.name || `#${t.id}`}@${draft.backend.name}`;
    const copy = new Tensor({ dtype: source.dtype, ne: source.ne, nb: source.nb, name });
    draft.inputs.push({ source, copy, from: home });
    this.map(draft.backend).set(t, copy);
    return copy;
  }

  /** `t` on its own backend, without copies (it lives there already). */
  onHome(t: Tensor, home: Backend): Tensor {
    const m = this.map(home);
    const known = m.get(t);
    if (known) return known;
    return this.materialize(t, home, (s) => this.onHome(s, home));
  }

  /** Leafs are themselves; views are rebuilt over the local version of their source. */
  materialize(t: Tensor, backend: Backend, sourceOf: (s: Tensor) => Tensor): Tensor {
    const m = this.map(backend);
    if (!t.viewSource || !isViewOp(t.op)) {
      // Inputs, not sourceless ops (arange): those are computed like any other node.
      if (t.op === Op.none) {
        m.set(t, t);
        return t;
      }
      const made = m.get(t);
      if (!made) throw new Error(`scheduler: ${t.label} used before it is computed`);
      return made;
    }
    const clone = rewrite(t, sourceOf);
    m.set(t, clone);
    return clone;
  }

  noteUse(t: Tensor, index: number): void {
    let owner: Tensor | null = t;
    while (owner && !this.producer.has(owner)) owner = owner.viewSource;
    if (owner && this.producer.get(owner) !== index) this.exported.add(owner);
  }
}

function rewrite(t: Tensor, sourceOf: (s: Tensor) => Tensor): Tensor {
  const src = t.src.map(sourceOf);
  const viewSource = t.viewSource ? sourceOf(t.viewSource) : null;
  return new Tensor({
    dtype: t.dtype,
    ne: t.ne,
    nb: t.nb,
    op: t.op,
    src,
    params: t.params,
    viewSource,
    viewOffset: t.viewOffset,
    name: t.name,
  });
}

/** Groups consecutive work by backend: consecutive nodes on one backend are one split. */
function drafts(graph: Graph, assigned: Map<Tensor, Assignment>): Draft[] {
  const out: Draft[] = [];
  for (const node of graph.nodes) {
    if (isViewOp(node.op)) continue;
    const backend = assigned.get(node)!.backend;
    const last = out[out.length - 1];
    if (last && last.backend === backend) last.originals.push(node);
    else out.push({ backend, originals: [node], nodes: [], inputs: [] });
  }
  return out;
}

/** Cuts `graph` into splits following `assigned`. */
export function buildSplits(graph: Graph, assigned: Map<Tensor, Assignment>): SplitSet {
  const builder = new Builder(assigned);
  const runs = drafts(graph, assigned);
  runs.forEach((draft, index) => {
    for (const original of draft.originals) {
      const clone = rewrite(original, (s) => builder.resolve(s, draft, index));
      builder.map(draft.backend).set(original, clone);
      builder.producer.set(clone, index);
      draft.nodes.push(clone);
    }
  });
  // A final output that is a view keeps the split computing its memory's owner.
  const finals = new Set<Tensor>();
  for (const output of graph.outputs) {
    let t: Tensor | null = builder.map(assigned.get(output)!.backend).get(output) ?? null;
    while (t && !builder.producer.has(t)) t = t.viewSource;
    if (t) finals.add(t);
  }
  const splits = runs.map((draft, index): Split => {
    const outputs = draft.nodes.filter((n) => builder.exported.has(n) || finals.has(n));
    // Results of other splits are leafs here: they were computed already.
    const foreign = new Set<Tensor>();
    for (const [t, at] of builder.producer) if (at !== index) foreign.add(t);
    const ends = outputs.length > 0 ? outputs : draft.nodes.slice(-1);
    return {
      index,
      backend: draft.backend,
      nodes: draft.nodes,
      inputs: draft.inputs,
      graph: Graph.buildWithInputs(ends, foreign),
    };
  });
  return { splits, local: builder.local, finals };
}
