import './style.css';
import { mountLive } from './ui/live.js';
import { mountSimulator } from './ui/simulator.js';

const simulator = document.getElementById('simulator') as HTMLElement;
const live = document.getElementById('live') as HTMLElement;
let liveView: { start(): void; stop(): void } | undefined;

/** Shows one view; the live view polls the service only while it is shown. */
function show(view: 'simulator' | 'live'): void {
  simulator.hidden = view !== 'simulator';
  live.hidden = view !== 'live';
  for (const link of document.querySelectorAll<HTMLAnchorElement>('nav a[data-tab]')) {
    link.classList.toggle('active', link.dataset.tab === view);
  }
  if (view === 'live') {
    liveView ??= mountLive(live);
    liveView.start();
  } else {
    liveView?.stop();
  }
}

const route = () => show(location.hash.startsWith('#live') ? 'live' : 'simulator');
window.addEventListener('hashchange', route);
// Route first: the simulator writes its state into the fragment only while it is shown.
route();
mountSimulator(simulator);
