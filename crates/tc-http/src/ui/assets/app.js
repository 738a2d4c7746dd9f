// taskcenter dashboard: live refresh of [data-live] regions every 2 s, the
// task buttons and the bulk actions. Every value from the server is put in
// with textContent; only the server's own escaped HTML fragments are swapped
// in as HTML.
(function () {
  'use strict';

  var REFRESH_MS = 2000;

  function csrf() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute('content') : '';
  }

  function setStatus(text, bad) {
    var el = document.getElementById('live-status');
    if (!el) { return; }
    el.textContent = text;
    el.classList.toggle('bad', !!bad);
  }

  // --- live refresh -------------------------------------------------------
  var busy = false;

  function refreshAll() {
    var regions = document.querySelectorAll('[data-live]');
    if (busy || regions.length === 0 || document.hidden) { return Promise.resolve(); }
    busy = true;
    var jobs = Array.prototype.map.call(regions, function (el) {
      return fetch(el.getAttribute('data-live'), { credentials: 'same-origin', cache: 'no-store' })
        .then(function (res) {
          if (res.status === 401) {
            // The session ended: the page itself now shows the login form.
            window.location.reload();
            return;
          }
          return res.text().then(function (html) {
            el.innerHTML = html;
          });
        });
    });
    return Promise.all(jobs).then(function () {
      setStatus('live · ' + new Date().toLocaleTimeString(), false);
    }, function () {
      setStatus('server unreachable', true);
    }).then(function () { busy = false; });
  }

  // --- answers ------------------------------------------------------------
  function show(box, ok, title, detail) {
    box.hidden = false;
    box.className = 'answer ' + (ok ? 'ok' : 'error');
    box.textContent = '';
    var strong = document.createElement('strong');
    strong.textContent = title;
    box.appendChild(strong);
    if (detail) {
      var pre = document.createElement('pre');
      pre.textContent = detail;
      box.appendChild(pre);
    }
  }

  function describe(method, url, res, body) {
    var what = url.match(/\/(cancel|retry)$/) ? RegExp.$1 : (method === 'DELETE' ? 'delete' : 'request');
    if (!res.ok) {
      var message = body;
      try { message = JSON.parse(body).error.message; } catch (e) { /* not JSON */ }
      return 'The API refused the ' + what + ' (HTTP ' + res.status + '): ' + message;
    }
    if (res.status === 204) { return 'Deleted (HTTP 204).'; }
    var state = '';
    try { state = JSON.parse(body).state; } catch (e) { /* not JSON */ }
    return 'Done (HTTP ' + res.status + '): the task is now ' + (state || 'changed') + '.';
  }

  function api(method, url, json) {
    var headers = { 'X-CSRF-Token': csrf() };
    var init = { method: method, credentials: 'same-origin', headers: headers };
    if (json !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(json);
    }
    return fetch(url, init).then(function (res) {
      return res.text().then(function (body) { return { res: res, body: body }; });
    });
  }

  document.addEventListener('click', function (event) {
    var button = event.target.closest('button[data-url]');
    if (!button) { return; }
    var method = button.getAttribute('data-method') || 'POST';
    var url = button.getAttribute('data-url');
    var question = button.getAttribute('data-confirm');
    if (question && !window.confirm(question)) { return; }
    var box = document.getElementById('answer');
    button.disabled = true;
    api(method, url).then(function (r) {
      show(box, r.res.ok, describe(method, url, r.res, r.body), r.body);
      box.setAttribute('data-status', String(r.res.status));
      var after = button.getAttribute('data-after');
      if (r.res.ok && after) {
        var link = document.createElement('a');
        link.href = after;
        link.textContent = 'Back to the tasks';
        box.appendChild(link);
        var live = document.getElementById('live');
        if (live) { live.removeAttribute('data-live'); live.classList.add('gone'); }
        return;
      }
      return refreshAll();
    }, function () {
      show(box, false, 'The server did not answer.', '');
    }).then(function () { button.disabled = false; });
  });

  // --- bulk ---------------------------------------------------------------
  function capital(word) { return word.charAt(0).toUpperCase() + word.slice(1); }

  function bulkRequest(dryRun) {
    var form = document.getElementById('filters');
    var filter = {};
    Array.prototype.forEach.call(form.elements, function (el) {
      if (el.name && el.value && el.name !== 'q' && el.name !== 'limit') { filter[el.name] = el.value.trim(); }
    });
    var action = document.getElementById('bulk-action').value;
    return { action: action, filter: filter, dry_run: dryRun };
  }

  function setupBulk() {
    var count = document.getElementById('bulk-count');
    if (!count) { return; }
    var apply = document.getElementById('bulk-apply');
    var box = document.getElementById('bulk-answer');
    var counted = null;
    var reset = function () {
      counted = null;
      apply.disabled = true;
      apply.textContent = '2. Apply…';
    };
    document.getElementById('filters').addEventListener('input', reset);
    document.getElementById('bulk-action').addEventListener('change', reset);
    count.addEventListener('click', function () {
      var request = bulkRequest(true);
      api('POST', '/tasks/bulk', request).then(function (r) {
        if (!r.res.ok) {
          show(box, false, describe('POST', '/tasks/bulk', r.res, r.body), r.body);
          reset();
          return;
        }
        var answer = JSON.parse(r.body);
        counted = { request: request, matched: answer.matched };
        var applies = { retry: 'failed or canceled', cancel: 'pending or running', delete: 'finished' }[request.action];
        show(box, true, answer.matched + ' tasks match this filter (dry run: nothing changed). ' +
          capital(request.action) + ' changes those that are ' + applies + '.', r.body);
        box.setAttribute('data-matched', String(answer.matched));
        apply.disabled = answer.matched === 0;
        apply.textContent = '2. ' + capital(request.action) + ' ' + answer.matched + ' tasks…';
      }, function () { show(box, false, 'The server did not answer.', ''); });
    });
    apply.addEventListener('click', function () {
      if (!counted) { return; }
      var request = counted.request;
      if (!window.confirm(capital(request.action) + ' the ' + counted.matched + ' tasks that match? Tasks the action does not apply to are skipped.')) { return; }
      request.dry_run = false;
      apply.disabled = true;
      api('POST', '/tasks/bulk', request).then(function (r) {
        if (!r.res.ok) {
          show(box, false, describe('POST', '/tasks/bulk', r.res, r.body), r.body);
          return;
        }
        var answer = JSON.parse(r.body);
        show(box, true, capital(request.action) + ': ' + answer.applied + ' of ' + answer.matched + ' matching tasks changed.', r.body);
        box.setAttribute('data-applied', String(answer.applied));
        counted = null;
        apply.textContent = '2. Apply…';
      }, function () { show(box, false, 'The server did not answer.', ''); });
    });
  }

  document.addEventListener('DOMContentLoaded', function () {
    setupBulk();
    if (document.querySelector('[data-live]')) {
      setStatus('live', false);
      window.setInterval(refreshAll, REFRESH_MS);
    }
  });
}());
