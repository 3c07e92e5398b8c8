// Progressive enhancement only: every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // the verify button: the result in place instead of a page of its own
  for (const form of document.querySelectorAll("form[data-fragment]")) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const target = document.getElementById(form.dataset.fragment);
      target.textContent = "verifying…";
      const answer = await fetch(form.action + "?fragment=1", { credentials: "same-origin" });
      target.innerHTML = await answer.text();
    });
  }
  // lazy cells (a run's completeness on the runs page): fetched after the page shows
  for (const cell of document.querySelectorAll("[data-lazy]")) {
    fetch(cell.dataset.lazy, { credentials: "same-origin" })
      .then((answer) => (answer.ok ? answer.text() : Promise.reject(answer.status)))
      .then((html) => { cell.innerHTML = html; })
      .catch(() => {});
  }
  // the side-by-side diff: collapse equal steps, jump to the next difference
  const table = document.querySelector("table.side-by-side");
  const collapse = document.getElementById("collapse-equal");
  if (table && collapse) {
    collapse.addEventListener("change", () => table.classList.toggle("collapsed", collapse.checked));
  }
  const next = document.getElementById("next-difference");
  if (table && next) {
    let at = -1;
    next.addEventListener("click", () => {
      const rows = [...table.querySelectorAll("tr.differs, tr.first-divergence")];
      if (!rows.length) return;
      rows.forEach((row) => row.classList.remove("current-difference"));
      at = (at + 1) % rows.length;
      rows[at].classList.add("current-difference");
      rows[at].scrollIntoView({ block: "center" });
    });
  }
});
