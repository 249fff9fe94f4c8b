// Starts `strata serve` on 127.0.0.1 with a free port for the Node tests:
// resolves once the start-up line names the port. stop() sends a signal and
// waits for the process to exit.
import { spawn } from 'node:child_process';

export async function startServer(strata, args) {
  const proc = spawn(strata, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code, sig) => reject(new Error(`strata serve exited (${code ?? sig}): ${err}`)));
  });
  return {
    proc,
    port,
    base: `http://127.0.0.1:${port}`,
    stderr: () => err,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const done = new Promise((r) => proc.once('exit', r));
      proc.kill(signal);
      await done;
    },
  };
}
