// A virtualised list of variable-height rows: only the rows near the viewport exist in the DOM.
//
// Heights start as estimates and are replaced by measurements as rows are rendered (and when a
// row resizes). The list sticks to the bottom while the user is there; when they have scrolled up,
// new rows and re-measured rows above the viewport never move what they are reading (the first
// visible row is kept anchored).
//
// Layout cost per render: one read of the new rows' heights (one layout of the contained scroller)
// and one scroll-position write. The scroller's own size and scroll offset are cached from
// ResizeObserver / scroll events rather than read back after writes.

export interface VListOptions<T> {
  scroller: HTMLElement;
  key(item: T): string;
  estimate(item: T, width: number): number;
  /** Creates the row's element (its content; the list positions it). */
  create(item: T): HTMLElement;
  /** Updates a row in place after its item changed. */
  update(el: HTMLElement, item: T, prev: T): void;
  /** Called when the "stuck to the bottom" state may have changed. */
  onScrollState?(atBottom: boolean): void;
  overscanPx?: number;
}

interface Row {
  el: HTMLElement;
  index: number;
  measuredFor: number; // the width the row was measured at (-1: measure again)
  top: number; // the offset it is positioned at (-1: not yet)
  pos: number; // the index its aria-posinset says
}

const STICK_PX = 32;

export class VList<T> {
  private items: T[] = [];
  private heights: number[] = [];
  private tops = new Float64Array(1);
  private dirtyFrom = 0;
  private rows = new Map<string, Row>();
  private rowOf = new WeakMap<Element, Row>();
  private readonly sizer: HTMLElement;
  private readonly ro: ResizeObserver | null;
  private rafId = 0;
  private stuck = true;
  private anchorKey: string | null = null;
  private anchorOffset = 0;
  private readonly overscan: number;
  // Cached geometry of the scroller.
  private viewH = 0;
  private width = 0;
  private scrollTop = 0;
  private ownTop = -1; // the scroll offset we set last (its scroll event is ours)
  private sizerH = -1;
  private setSize = -1;

  constructor(private o: VListOptions<T>) {
    this.overscan = o.overscanPx ?? 600;
    this.sizer = document.createElement('div');
    this.sizer.className = 'vlist-sizer';
    this.sizer.setAttribute('role', 'list');
    o.scroller.append(this.sizer);
    o.scroller.addEventListener('scroll', this.onScroll, { passive: true });
    this.ro =
      typeof ResizeObserver === 'function'
        ? new ResizeObserver((entries) => {
            let any = false;
            for (const e of entries) {
              if (e.target === o.scroller) {
                const w = Math.round(e.contentRect.width);
                const h = Math.round(e.contentRect.height);
                if (w !== this.width && this.width !== 0) for (const r of this.rows.values()) r.measuredFor = -1;
                this.width = w;
                this.viewH = h;
                any = true;
                continue;
              }
              const r = this.rowOf.get(e.target);
              if (!r) continue;
              const h = e.borderBoxSize?.[0]?.blockSize ?? (e.target as HTMLElement).offsetHeight;
              if (Math.abs(h - this.heights[r.index]) >= 0.5) {
                r.measuredFor = -1;
                any = true;
              }
            }
            if (any) this.schedule();
          })
        : null;
    this.ro?.observe(o.scroller);
  }

  get atBottom(): boolean {
    return this.stuck;
  }

  get length(): number {
    return this.items.length;
  }

  /** The list element itself (role=list), for labelling. */
  get listElement(): HTMLElement {
    return this.sizer;
  }

  private est(it: T): number {
    return this.o.estimate(it, this.width || 600);
  }

  // ---- data operations (mirror the store's changes) -----------------------------------------

  reset(items: T[], stickToBottom = true): void {
    for (const r of this.rows.values()) this.drop(r);
    this.rows.clear();
    this.items = items;
    this.heights = items.map((it) => this.est(it));
    this.dirtyFrom = 0;
    this.stuck = stickToBottom;
    this.anchorKey = null;
    this.render();
  }

  /** The item at `index` was inserted into the (shared) array. */
  inserted(index: number): void {
    this.heights.splice(index, 0, this.est(this.items[index]));
    for (const r of this.rows.values()) if (r.index >= index) r.index++;
    this.dirtyFrom = Math.min(this.dirtyFrom, index);
  }

  /** The item at `index` changed in place. */
  updated(index: number, prev: T): void {
    const it = this.items[index];
    const row = this.rows.get(this.o.key(it));
    if (row) {
      this.o.update(row.el, it, prev);
      row.measuredFor = -1;
    } else {
      this.heights[index] = this.est(it);
      this.dirtyFrom = Math.min(this.dirtyFrom, index);
    }
  }

  /** The item moved from `from` to `to` (it is already at `to` in the array). */
  moved(from: number, to: number): void {
    const [h] = this.heights.splice(from, 1);
    this.heights.splice(to, 0, h);
    const key = this.o.key(this.items[to]);
    for (const [k, r] of this.rows) {
      if (k === key) continue;
      if (from < to && r.index > from && r.index <= to) r.index--;
      else if (to < from && r.index >= to && r.index < from) r.index++;
    }
    const row = this.rows.get(key);
    if (row) row.index = to;
    this.dirtyFrom = Math.min(this.dirtyFrom, from, to);
  }

  /**
   * `n` items were put in front of the (shared) array (an older page). What the user is reading
   * stays where it is: the anchor row keeps its offset in the viewport.
   */
  prepended(n: number): void {
    if (n <= 0) return;
    if (!this.stuck && this.anchorKey == null && this.items.length > n) {
      // Not scrolled since the last render: anchor on the row at the top of the viewport.
      this.anchorKey = this.o.key(this.items[n + this.indexAt(this.scrollTop)] ?? this.items[n]);
      this.anchorOffset = 0;
    }
    const front = this.items.slice(0, n).map((it) => this.est(it));
    this.heights = front.concat(this.heights);
    for (const r of this.rows.values()) r.index += n;
    this.dirtyFrom = 0;
  }

  /** `n` items were put at the end of the (shared) array (a newer page loaded again). */
  appended(n: number): void {
    if (n <= 0) return;
    const at = this.items.length - n;
    if (this.stuck && at > 0) {
      // At the end of what was loaded, not of the conversation: what the user reads stays put.
      this.stuck = false;
      if (this.anchorKey == null) {
        const i = this.dirtyFrom === Number.MAX_SAFE_INTEGER ? this.indexAt(this.scrollTop) : 0;
        this.anchorKey = this.o.key(this.items[Math.min(i, at - 1)]);
        this.anchorOffset = this.dirtyFrom === Number.MAX_SAFE_INTEGER ? this.tops[i] - this.scrollTop : 0;
      }
    }
    for (let i = at; i < this.items.length; i++) this.heights.push(this.est(this.items[i]));
    this.dirtyFrom = Math.min(this.dirtyFrom, at);
  }

  /**
   * Far items left the (shared) array: `front` from its start, `back` from its end. What the
   * user is reading stays where it is (the anchor row keeps its offset in the viewport).
   */
  dropped(front: number, back: number): void {
    if (front <= 0 && back <= 0) return;
    if (front > 0 && !this.stuck && this.anchorKey == null) {
      // The row at the top of the viewport, by its index before the drop.
      const i = this.indexAt(this.scrollTop) - front;
      if (i >= 0 && i < this.items.length) {
        this.anchorKey = this.o.key(this.items[i]);
        this.anchorOffset = this.tops[i + front] - this.scrollTop;
      }
    }
    const n = this.items.length;
    if (back > 0) this.heights.length = n + front;
    if (front > 0) this.heights.splice(0, front);
    for (const [k, r] of this.rows) {
      r.index -= front;
      if (r.index < 0 || r.index >= n) {
        this.drop(r);
        this.rows.delete(k);
      }
    }
    this.dirtyFrom = front > 0 ? 0 : Math.min(this.dirtyFrom, n);
  }

  /** Scrolls so that the item with `key` is in view (a third down the viewport); false when absent. */
  scrollToKey(key: string): boolean {
    const i = this.items.findIndex((it) => this.o.key(it) === key);
    if (i < 0) return false;
    this.stuck = false;
    this.anchorKey = key;
    this.anchorOffset = Math.round((this.viewH || this.o.scroller.clientHeight) / 3);
    this.render();
    return true;
  }

  /** The rendered element of the item with `key` (only rows near the viewport exist). */
  elementOf(key: string): HTMLElement | null {
    return this.rows.get(key)?.el ?? null;
  }

  /** Rows in the DOM now. */
  get renderedCount(): number {
    return this.rows.size;
  }

  /** Measure every rendered row again (e.g. after the panel was hidden) on the next frame. */
  remeasureAll(): void {
    for (const r of this.rows.values()) r.measuredFor = -1;
    this.viewH = 0; // re-read the scroller's size
    this.schedule();
  }

  scrollToBottom(): void {
    this.stuck = true;
    this.render();
  }

  // ---- rendering -----------------------------------------------------------------------------

  schedule(): void {
    if (this.rafId) return;
    this.rafId = requestAnimationFrame(() => {
      this.rafId = 0;
      this.render();
    });
  }

  private onScroll = () => {
    const s = this.o.scroller;
    const top = s.scrollTop;
    this.scrollTop = top;
    if (this.ownTop >= 0 && Math.abs(top - this.ownTop) < 1) return; // the scroll we made
    this.ownTop = -1;
    const wasStuck = this.stuck;
    this.stuck = s.scrollHeight - top - s.clientHeight <= STICK_PX;
    this.captureAnchor();
    if (wasStuck !== this.stuck) this.o.onScrollState?.(this.stuck);
    this.schedule();
  };

  private recomputeTops(): void {
    const n = this.items.length;
    if (this.tops.length < n + 1) {
      const t = new Float64Array(Math.max(n + 1, this.tops.length * 2));
      t.set(this.tops.subarray(0, Math.min(this.tops.length, this.dirtyFrom + 1)));
      this.tops = t;
    }
    const from = Math.min(this.dirtyFrom, n);
    for (let i = from; i < n; i++) this.tops[i + 1] = this.tops[i] + this.heights[i];
    this.dirtyFrom = Number.MAX_SAFE_INTEGER;
  }

  private total(): number {
    return this.tops[this.items.length];
  }

  /** Index of the row containing offset `y`. */
  private indexAt(y: number): number {
    let lo = 0;
    let hi = this.items.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.tops[mid] <= y) lo = mid;
      else hi = mid - 1;
    }
    return Math.max(0, lo);
  }

  private captureAnchor(): void {
    if (this.stuck || this.items.length === 0) {
      this.anchorKey = null;
      return;
    }
    if (this.dirtyFrom !== Number.MAX_SAFE_INTEGER) return; // keep the last consistent anchor
    const i = this.indexAt(this.scrollTop);
    this.anchorKey = this.o.key(this.items[i]);
    this.anchorOffset = this.tops[i] - this.scrollTop;
  }

  private anchorIndex(): number {
    if (this.anchorKey == null) return -1;
    const row = this.rows.get(this.anchorKey);
    if (row && row.index < this.items.length && this.o.key(this.items[row.index]) === this.anchorKey) return row.index;
    return this.items.findIndex((it) => this.o.key(it) === this.anchorKey);
  }

  private drop(r: Row): void {
    this.ro?.unobserve(r.el);
    r.el.remove();
  }

  /** Where the viewport should start, from the model (no layout read). */
  private wantedTop(): number {
    let top: number;
    if (this.stuck) top = this.total() - this.viewH;
    else {
      const ai = this.anchorIndex();
      top = ai >= 0 ? this.tops[ai] - this.anchorOffset : this.scrollTop;
    }
    return Math.max(0, Math.min(top, this.total() - this.viewH));
  }

  /**
   * Brings the DOM in line with the data without reading layout: new rows are created and placed
   * at their estimated offsets, and the measuring pass (heights, scroll position) is left to the
   * next animation frame — which always runs before that frame is painted, so an unmeasured row is
   * never seen. Used for live events, where this keeps the cost per event small.
   */
  renderFast(): void {
    const s = this.o.scroller;
    if (!s.isConnected || this.viewH <= 0 || this.items.length === 0) {
      this.render();
      return;
    }
    this.recomputeTops();
    const top = this.wantedTop();
    const start = this.indexAt(Math.max(0, top - this.overscan));
    const end = this.indexAt(top + this.viewH + this.overscan);
    this.place(start, end);
    this.writePositions();
    this.schedule();
  }

  /** Creates / drops / orders the rows of [start, end]; returns the ones to measure. */
  private place(start: number, end: number): Row[] {
    const want = new Set<string>();
    for (let i = start; i <= end; i++) want.add(this.o.key(this.items[i]));
    for (const [k, r] of this.rows) {
      if (!want.has(k)) {
        this.drop(r);
        this.rows.delete(k);
      }
    }
    // Keep the DOM order equal to the list order (for screen readers, find-in-page, selection).
    const toMeasure: Row[] = [];
    let prevEl: HTMLElement | null = null;
    for (let i = start; i <= end; i++) {
      const it = this.items[i];
      const k = this.o.key(it);
      let r = this.rows.get(k);
      if (!r) {
        const el = this.o.create(it);
        el.classList.add('vrow');
        el.setAttribute('role', 'listitem');
        r = { el, index: i, measuredFor: -1, top: -1, pos: -1 };
        this.rows.set(k, r);
        this.rowOf.set(el, r);
        this.ro?.observe(el);
      }
      r.index = i;
      const wantNext: ChildNode | null = prevEl ? prevEl.nextSibling : this.sizer.firstChild;
      if (wantNext !== r.el) this.sizer.insertBefore(r.el, wantNext);
      prevEl = r.el;
      if (r.measuredFor !== this.width) toMeasure.push(r);
    }
    return toMeasure;
  }

  /** Row offsets, ARIA positions and the list height (writes only). */
  private writePositions(): void {
    const n = this.items.length;
    for (const r of this.rows.values()) {
      const t = this.tops[r.index];
      if (r.top !== t) {
        r.top = t;
        r.el.style.transform = `translateY(${t}px)`;
      }
      if (r.pos !== r.index) {
        r.pos = r.index;
        r.el.setAttribute('aria-posinset', String(r.index + 1));
      }
      if (this.setSize !== n || !r.el.hasAttribute('aria-setsize')) r.el.setAttribute('aria-setsize', String(n));
    }
    this.setSize = n;
    const total = n > 0 ? this.total() : 0;
    if (total !== this.sizerH) {
      this.sizerH = total;
      this.sizer.style.height = `${total}px`;
    }
  }

  /** The full pass: measure new rows (one layout), position everything, set the scroll offset. */
  render(): void {
    if (this.rafId) {
      cancelAnimationFrame(this.rafId);
      this.rafId = 0;
    }
    const s = this.o.scroller;
    if (!s.isConnected) return;
    if (this.viewH <= 0) {
      this.viewH = s.clientHeight;
      this.width = s.clientWidth;
      this.scrollTop = s.scrollTop;
    }
    if (this.viewH <= 0) return; // hidden: rendered when shown
    const n = this.items.length;
    if (n === 0) {
      for (const r of this.rows.values()) this.drop(r);
      this.rows.clear();
    }
    let top = 0;
    for (let pass = 0; pass < 4 && n > 0; pass++) {
      this.recomputeTops();
      top = this.wantedTop();
      const start = this.indexAt(Math.max(0, top - this.overscan));
      const end = this.indexAt(top + this.viewH + this.overscan);
      const toMeasure = this.place(start, end);
      if (toMeasure.length === 0) break;
      // One layout for all new / changed rows, then fold the differences into the heights.
      let changed = false;
      for (const r of toMeasure) {
        const h = r.el.offsetHeight;
        r.measuredFor = this.width;
        if (h > 0 && h !== this.heights[r.index]) {
          this.heights[r.index] = h;
          this.dirtyFrom = Math.min(this.dirtyFrom, r.index);
          changed = true;
        }
      }
      if (!changed) break;
    }
    // Writes only from here on: positions, the list height, the scroll offset.
    if (n > 0) {
      this.recomputeTops();
      top = this.wantedTop();
    }
    this.writePositions();
    if (Math.abs(this.scrollTop - top) >= 1) {
      this.ownTop = top;
      this.scrollTop = top;
      s.scrollTop = top;
    }
    if (!this.stuck) this.captureAnchor();
    this.o.onScrollState?.(this.stuck);
  }

  destroy(): void {
    this.o.scroller.removeEventListener('scroll', this.onScroll);
    this.ro?.disconnect();
    for (const r of this.rows.values()) this.drop(r);
    this.rows.clear();
    this.sizer.remove();
  }
}
