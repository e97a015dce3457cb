import { defineConfig } from 'vitest/config';

// The app serves these files at `/` (headless mode) and from the Tauri bundle: every asset path
// is relative so the same build works in both places.
export default defineConfig({
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    // One small JS file and one CSS file; nothing is loaded from anywhere else at run time.
    assetsInlineLimit: 0,
    modulePreload: false,
  },
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node',
  },
});
