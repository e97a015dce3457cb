// The UI's kind registry: a kind's id → the module of its Settings → Assistant form. The kinds
// themselves (ids, names, settings fields, what they can do) come from the core's one list
// (`GET /api/assistant/kinds`, the same entries in `GET /api/providers`); a kind listed there
// with no module here gets a form built from its settings fields (kinds/generic.ts), or, with
// none, just the "Use this kind" button.
//
// Adding a kind's own form: a file in this folder and one line in MODULES.

import type { Assistant, AssistantKindInfo } from '../types';
import { ByoSettings } from './byo';
import { ClawborratorForm } from './clawborrator';
import type { AssistantActions, KindForm, KindModule } from './form';
import { GatewaySettings } from './gateway';
import { GenericKindForm } from './generic';
import { incoming } from './incoming';

export type { AssistantActions, KindForm, KindModule } from './form';

const MODULES: Record<string, KindModule> = {
  incoming,
  byo: { savesItself: true, create: (actions) => new ByoSettings(actions) },
  'openclaw-gateway': { savesItself: true, canStop: true, create: (actions) => new GatewaySettings(actions) },
  clawborrator: { savesItself: true, create: (actions) => new ClawborratorForm(actions) },
};

/** A built form and whether it saves (and so switches) by itself. */
export interface BuiltForm {
  form: KindForm;
  savesItself: boolean;
}

/** The module of a kind's own form, if it has one. */
export function kindModule(id: string): KindModule | null {
  return MODULES[id] ?? null;
}

/** The ids with a form module of their own (built before the list of kinds is read). */
export function moduleKinds(): string[] {
  return Object.keys(MODULES);
}

/** The form of a kind: its own module's, else one from its settings fields, else none. */
export function buildForm(kind: AssistantKindInfo | string, actions: AssistantActions, result: HTMLElement): BuiltForm | null {
  const id = typeof kind === 'string' ? kind : kind.id;
  const m = MODULES[id];
  if (m) return { form: m.create(actions, result), savesItself: m.savesItself };
  if (typeof kind !== 'string' && kind.settings?.length) return { form: new GenericKindForm(kind, actions, result), savesItself: true };
  return null;
}

/** The status card's next step while `a`'s kind is in use and shown. */
export function kindNextStep(a: Assistant): string | null {
  return MODULES[a.kind]?.nextStep?.(a) ?? null;
}

/** What the list of kinds said about each kind (kept from the last read). */
const served = new Map<string, AssistantKindInfo>();

/** Keeps what the core's list says (`GET /api/providers` or `GET /api/assistant/kinds`). */
export function setServedKinds(kinds: readonly AssistantKindInfo[]): void {
  served.clear();
  for (const k of kinds) served.set(k.id, k);
}

/**
 * Whether a running reply of `kind` can be stopped (`POST /api/sessions/{id}/stop`), as the list
 * of kinds says (before it is read: as the kind's form module says).
 */
export function canStop(kind: string | null | undefined): boolean {
  if (!kind) return false;
  const k = served.get(kind);
  if (k && typeof k.can_stop === 'boolean') return k.can_stop;
  return MODULES[kind]?.canStop ?? false;
}
