// Settings → Audio, part prefs: this window's own preference "start listening with a new call"
// (kept in the browser's storage; see ../audiosettings.ts).

const LISTEN_ON_START_KEY = 'stagewhisper.listen_on_start';

/** Whether "Start call" also starts listening (a preference of this window; on unless turned off). */
export function listenOnStart(storage: Storage | null = safeStorage()): boolean {
  try {
    return storage?.getItem(LISTEN_ON_START_KEY) !== 'off';
  } catch {
    return true;
  }
}

export function setListenOnStart(on: boolean, storage: Storage | null = safeStorage()): void {
  try {
    storage?.setItem(LISTEN_ON_START_KEY, on ? 'on' : 'off');
  } catch {
    /* storage disabled: the choice lasts for this page */
  }
}

function safeStorage(): Storage | null {
  try {
    return typeof localStorage === 'undefined' ? null : localStorage;
  } catch {
    return null;
  }
}
