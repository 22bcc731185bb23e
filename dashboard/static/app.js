// The run page's script: live updates from the event stream and the
// drill-down into a step. The charts are drawn by the server; this script
// only swaps in the redrawn fragment and fetches a step's details.
(function () {
  'use strict';

  var run = document.getElementById('run');
  if (!run) {
    return;
  }
  var base = run.dataset.base;
  var live = document.getElementById('live');
  var drill = document.getElementById('drill');
  var drillBody = document.getElementById('drill-body');
  var drillTitle = document.getElementById('drill-title');
  var selected = null; // {agent, step} of the open drill-down

  function setLive(text, state) {
    live.textContent = text;
    live.dataset.state = state;
  }

  // Live updates: each "steps" event means new rows; the charts are
  // fetched again, at most one fetch at a time.
  var fetching = false;
  var again = false;
  function redraw() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    fetch(base + 'charts', {headers: {Accept: 'text/html'}})
      .then(function (r) {
        if (!r.ok) {
          throw new Error('charts: HTTP ' + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        run.innerHTML = html;
        markSelected();
      })
      .catch(function (err) {
        setLive('update failed: ' + err.message, 'error');
      })
      .then(function () {
        fetching = false;
        if (again) {
          again = false;
          redraw();
        }
      });
  }

  if (window.EventSource) {
    var es = new EventSource(run.dataset.events + '?since=' + encodeURIComponent(run.dataset.rev));
    es.onopen = function () { setLive('live', 'live'); };
    es.onerror = function () { setLive('reconnecting…', 'down'); };
    es.addEventListener('steps', function () {
      setLive('live', 'live');
      redraw();
    });
  } else {
    setLive('not live: no EventSource in this browser', 'down');
  }

  // Drill-down: a click on a point opens that agent's step.
  function markSelected() {
    var old = run.querySelectorAll('circle.pt.selected');
    for (var i = 0; i < old.length; i++) {
      old[i].classList.remove('selected');
    }
    if (!selected) {
      return;
    }
    var svgs = run.querySelectorAll('svg[data-agent]');
    for (var j = 0; j < svgs.length; j++) {
      if (svgs[j].dataset.agent !== selected.agent) {
        continue;
      }
      var pts = svgs[j].querySelectorAll('circle.pt');
      for (var k = 0; k < pts.length; k++) {
        if (pts[k].dataset.step === selected.step) {
          pts[k].classList.add('selected');
        }
      }
    }
  }

  function openStep(agent, step) {
    selected = {agent: agent, step: step};
    markSelected();
    drillTitle.textContent = agent + ' · step ' + step;
    drillBody.textContent = 'Loading…';
    drill.hidden = false;
    fetch(base + 'agent/' + encodeURIComponent(agent) + '/step/' + encodeURIComponent(step), {headers: {Accept: 'text/html'}})
      .then(function (r) {
        if (!r.ok) {
          throw new Error('HTTP ' + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        if (selected && selected.agent === agent && selected.step === step) {
          drillBody.innerHTML = html;
        }
      })
      .catch(function (err) {
        drillBody.textContent = 'Loading step ' + step + ' failed: ' + err.message;
      });
  }

  function closeStep() {
    selected = null;
    drill.hidden = true;
    markSelected();
  }

  run.addEventListener('click', function (ev) {
    var pt = ev.target.closest('circle.pt[data-step]');
    var svg = pt && pt.closest('svg[data-agent]');
    if (svg) {
      openStep(svg.dataset.agent, pt.dataset.step);
    }
  });
  document.getElementById('drill-close').addEventListener('click', closeStep);
  document.addEventListener('keydown', function (ev) {
    if (ev.key === 'Escape' && !drill.hidden) {
      closeStep();
    }
  });
})();
