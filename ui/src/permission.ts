// A permission card in the chat: a tool of the assistant (a Claude Code session through a
// clawborrator hub) waits for the user's decision. Shows the tool and what it would do, with
// Allow / Deny buttons while pending (plain buttons: Tab, Enter and Space work), and once settled
// who decided. The core settles the card in place (`message_updated`), so the row is simply
// rendered again. All data goes in as text (textContent), never as markup.

import { clockTime, fullTime, h } from './dom';
import type { Message, PermissionInfo } from './types';

/** Sends the decision (`POST /api/permissions/{request_id}`); throws with a sentence on failure. */
export type Decide = (requestId: string, allow: boolean) => Promise<void>;

/** The settled line: `Allowed by ana`, `Denied by you`, `Expired: nobody answered in time`. */
export function settledText(p: PermissionInfo): string {
  const by = p.resolver ? ` by ${p.resolver}` : '';
  switch (p.state) {
    case 'allow':
      return `Allowed${by}`;
    case 'deny':
      return `Denied${by}`;
    case 'expired':
      return 'Expired: nobody answered in time';
    default:
      return 'Waiting for your decision';
  }
}

/** The card's content (the row's bubble). */
export function permissionCard(m: Message, decide: Decide): HTMLElement {
  const p = m.permission;
  const t = m.occurred_at ?? m.received_at;
  const tool = p?.tool || 'a tool';
  const card = h(
    'div',
    {
      class: `msg-bubble perm-card perm-${p?.state ?? 'pending'}`,
      role: 'group',
      'aria-label': `Permission request: ${tool}`,
      'data-request-id': p?.request_id ?? '',
      'data-state': p?.state ?? 'pending',
    },
    h(
      'div',
      { class: 'msg-meta' },
      h('span', { class: 'msg-who' }, 'Permission'),
      t ? h('time', { datetime: t, title: fullTime(t) }, clockTime(t)) : null,
    ),
    h('div', { class: 'perm-title' }, 'Claude Code wants to use ', h('code', { class: 'perm-tool' }, tool)),
  );
  if (p?.input_preview) card.append(h('pre', { class: 'perm-preview' }, p.input_preview));
  if (!p || p.state !== 'pending') {
    card.append(h('div', { class: 'perm-settled', role: 'status' }, p ? settledText(p) : ''));
    return card;
  }
  const err = h('div', { class: 'perm-error field-error', role: 'alert', hidden: true });
  const allow = h('button', { class: 'btn btn-primary btn-small perm-allow', type: 'button', 'aria-label': `Allow ${tool}` }, 'Allow');
  const deny = h('button', { class: 'btn btn-danger btn-small perm-deny', type: 'button', 'aria-label': `Deny ${tool}` }, 'Deny');
  const go = async (yes: boolean) => {
    allow.disabled = true;
    deny.disabled = true;
    err.hidden = true;
    try {
      await decide(p.request_id, yes);
    } catch (e) {
      err.textContent = e instanceof Error ? e.message : String(e);
      err.hidden = false;
      allow.disabled = false;
      deny.disabled = false;
    }
  };
  allow.addEventListener('click', () => void go(true));
  deny.addEventListener('click', () => void go(false));
  card.append(h('div', { class: 'perm-actions' }, allow, deny), err);
  return card;
}
