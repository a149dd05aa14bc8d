/* PersonaLab web app: the chat's streamed turn and the outline editor (issue 24). No framework: htmx does the
   rest. A turn is a POST read as server-sent events (event: token | emotion | done | error). */
(function () {
  "use strict";
  var busy = false;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text) node.textContent = text; /* textContent: user and model text never becomes markup */
    return node;
  }

  function showError(message) {
    var box = document.getElementById("turn-error");
    if (!box) return;
    box.textContent = message;
    box.hidden = false;
  }

  function showRecap(lines) {
    /* the recap of the last session, which a turn after a pause starts from (seed 002 可暂停/继续) */
    var box = document.getElementById("recap");
    if (!box || !lines.length) return;
    var list = document.getElementById("recap-lines");
    list.textContent = "";
    lines.forEach(function (line) { list.appendChild(el("li", "", line)); });
    box.hidden = false;
  }

  function refreshMain(chat) {
    return fetch(chat.dataset.main, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var main = document.getElementById("chat-main");
        main.innerHTML = html;
        if (window.htmx) window.htmx.process(main);
        var lines = document.getElementById("lines");
        if (lines && lines.lastElementChild) lines.lastElementChild.scrollIntoView({ block: "end" });
      });
  }

  function parseEvents(buffer, handle) {
    var frames = buffer.split("\n\n");
    var rest = frames.pop();
    frames.forEach(function (frame) {
      var event = "message", data = "";
      frame.split("\n").forEach(function (line) {
        if (line.indexOf("event: ") === 0) event = line.slice(7);
        else if (line.indexOf("data: ") === 0) data += line.slice(6);
      });
      if (data) handle(event, JSON.parse(data));
    });
    return rest;
  }

  function runTurn(form) {
    var chat = document.getElementById("chat");
    var error = document.getElementById("turn-error");
    var label = document.getElementById("streaming");
    var text = form.querySelector("textarea[name=message]");
    var action = form.querySelector("input[name=action]").value;
    if (busy) return; /* a double click sends one turn */
    if (text && !text.value.trim()) { showError(chat.dataset.empty || ""); text.focus(); return; }
    busy = true;
    error.hidden = true;
    var buttons = document.querySelectorAll(".turn-form button[type=submit]");
    buttons.forEach(function (b) { b.disabled = true; });
    var lines = document.getElementById("lines");
    if (action === "send") lines.appendChild(el("li", "line user pending", text.value));
    var bubble = el("li", "line assistant streaming");
    bubble.id = "streaming-reply";
    var head = el("div", "who");
    var body = el("div", "text");
    bubble.appendChild(head);
    bubble.appendChild(body);
    lines.appendChild(bubble);
    label.hidden = false;
    var finished = false;
    function finish(ok) {
      finished = true;
      busy = false;
      label.hidden = true;
      buttons.forEach(function (b) { b.disabled = false; });
      if (ok && text && action === "send") {
        text.value = "";
        /* the host lines and the choice belonged to this turn */
        form.querySelectorAll("[name=host_text], [name=choice_text]").forEach(function (f) { f.value = ""; });
      }
      return refreshMain(chat);
    }
    fetch(form.getAttribute("action"), { method: "POST", body: new FormData(form), credentials: "same-origin" })
      .then(function (response) {
        var type = response.headers.get("content-type") || "";
        if (type.indexOf("text/event-stream") < 0) {
          return response.text().then(function (html) {
            var doc = new DOMParser().parseFromString(html, "text/html");
            var msg = doc.getElementById("error-message");
            showError(msg ? msg.textContent : response.status + " " + response.statusText);
            return finish(false);
          });
        }
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function pump() {
          return reader.read().then(function (step) {
            if (step.done) { if (!finished) return finish(false); return; }
            buffer = parseEvents(buffer + decoder.decode(step.value, { stream: true }), function (event, data) {
              if (event === "token") body.appendChild(document.createTextNode(data.text));
              else if (event === "emotion") head.appendChild(el("span", "emotion", data.text));
              else if (event === "error") { showError(data.message); finish(false); }
              else if (event === "done") { showRecap(data.recap || []); finish(true); }
            });
            return pump();
          });
        }
        return pump();
      })
      .catch(function (err) { showError(String(err)); if (!finished) finish(false); });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.classList && form.classList.contains("turn-form")) {
      event.preventDefault();
      runTurn(form);
    }
  });

  document.addEventListener("keydown", function (event) {
    /* Ctrl+Enter (or Cmd+Enter) in the message box sends */
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.name === "message") {
      event.preventDefault();
      var form = event.target.form;
      if (form) form.requestSubmit();
    }
  });

  /* the outline editor: add, move up / down, remove a point (the form posts the textareas in order) */
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-outline]") : null;
    if (!button) return;
    var list = document.getElementById("outline-points");
    var what = button.dataset.outline;
    var item = button.closest("li");
    if (what === "add") {
      var template = list.querySelector("li");
      var fresh = template.cloneNode(true);
      var area = fresh.querySelector("textarea");
      area.value = "";
      area.id = "point-" + (list.children.length + 1);
      fresh.querySelector("label").htmlFor = area.id;
      fresh.querySelector("label").textContent = (button.dataset.label || "") + " " + (list.children.length + 1);
      list.appendChild(fresh);
      area.focus();
    } else if (what === "up" && item.previousElementSibling) {
      list.insertBefore(item, item.previousElementSibling);
      button.focus();
    } else if (what === "down" && item.nextElementSibling) {
      list.insertBefore(item.nextElementSibling, item);
      button.focus();
    } else if (what === "remove" && list.children.length > 1) {
      list.removeChild(item);
    }
  });
})();
