// Settings → Audio → Model (src/settings/models.ts): sizes and download states in words, and the
// list read defensively.

import { describe, expect, it } from 'vitest';
import { downloadText, formatBytes, normModels } from '../src/settings/models';

describe('models in words', () => {
  it('says sizes as file managers do', () => {
    expect(formatBytes(77_704_715)).toBe('77.7 MB');
    expect(formatBytes(1_500_000_000)).toBe('1.50 GB');
    expect(formatBytes(2048)).toBe('2 kB');
    expect(formatBytes(0)).toBe('0 B');
  });

  it('says where a download stands', () => {
    expect(downloadText({ state: 'downloading', done: 38_852_358, total: 77_704_715 })).toBe('Downloading… 38.9 MB of 77.7 MB (50 %)');
    expect(downloadText({ state: 'paused', done: 10, total: 100 })).toMatch(/10 %: Download resumes it/);
    expect(downloadText({ state: 'failed', done: 0, total: 1, error: 'checksum_mismatch', message: 'not the expected file' })).toBe('Download failed: not the expected file');
    expect(downloadText(undefined)).toBe('');
  });

  it('reads only a model list', () => {
    expect(normModels({ models_dir: '/d', disk_used: 0, models: [] })?.models).toEqual([]);
    expect(normModels({ models: 'x', disk_used: 0 })).toBeNull();
    expect(normModels(null)).toBeNull();
  });
});
