// Words every kind's form shares: a status in words, and the sentence after an answer.

import type { Assistant } from '../types';

const STATUS_LABEL: Record<string, string> = {
  not_configured: 'Not configured',
  checking: 'Checking…',
  online: 'Online',
  auth_failed: 'Auth failed',
  unreachable: 'Unreachable',
  misconfigured: 'Misconfigured',
};

/** The label of a link status (`auth_failed` → `Auth failed`). */
export function statusLabel(status: string | null | undefined): string {
  if (!status) return 'Not configured';
  return STATUS_LABEL[status] ?? status.replace(/_/g, ' ');
}

/** The sentence after an answer: the status and its detail. */
export function outcome(a: Assistant | null, prefix: string): string {
  if (!a) return prefix;
  return `${prefix} ${statusLabel(a.status)}${a.detail ? ` — ${a.detail}` : '.'}`;
}
