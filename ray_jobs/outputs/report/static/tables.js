/* dateline report tables (ray_jobs/outputs/report/tables.py inlines this after list.min.js).
 *
 * Every table with a header (<thead>) and at least two body rows becomes a list.js List: click a
 * column header to sort by it (again: the other way), a search box keeps the rows holding every
 * word typed, and a score filter keeps the rows whose value in the chosen numeric column lies
 * within [from, to]. Sorting, searching, filtering and hiding rows are list.js's (List.sort,
 * List.search, List.filter); this file only wires a table's cells and controls to them. Without
 * JavaScript the tables are plain ones and none of the controls shows.
 *
 * A table can say more with attributes (the episode index does):
 *   data-score="6 7"     the columns (0-based) the score filter offers (default: every numeric one)
 *   data-score-label=".."  the filter's label (default "filter")
 *   data-tools="ID"      put the controls into element ID (unhidden) instead of a line above the table
 *                        (and enhance the table even with a single row)
 *   data-shown="ID"      write the number of rows shown into element ID instead of "N of M shown"
 *   <select data-filter-of="TABLE ID" data-attr="status">: rows whose data-status is the selected value
 * The controls of a table with an id have ids: ID-search, ID-column (its options' values are column
 * numbers), ID-from and ID-to; they act on "input" (the select on "change") events.
 * A cell's data-v attribute, when the page sets one, is its value for sorting and filtering (the
 * full-precision number behind a rounded one); else its text is.
 */
(function () {
  'use strict';
  if (typeof List !== 'function') return;

  // The number a cell starts with: "0.512 [0.40, 0.61] (n=30, bootstrap)" -> 0.512, "$2.0000" -> 2,
  // "#1" -> 1, "6/6" -> 6, "1,100" -> 1100; text, a hash ("3f2a...") or "n/a" -> NaN.
  var NUM = /^[$#]?([-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)%?(?=$|[\s/(\[=,;])/i;
  function num(s) {
    var m = NUM.exec(String(s).trim());
    return m ? parseFloat(m[1].replace(/,/g, '')) : NaN;
  }
  function blank(s) { return s === '' || s === '-' || s === 'n/a'; }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text) e.textContent = text;
    return e;
  }
  var each = function (xs, f) { Array.prototype.forEach.call(xs, f); };

  function enhance(table) {
    var body = table.tBodies[0];
    // a table of one row has nothing to sort or search, unless it says where its controls go
    if (!table.tHead || table.tBodies.length !== 1 || body.rows.length < (table.dataset.tools ? 1 : 2)) return;
    var heads = table.tHead.rows[0].cells, names = [], total = body.rows.length;
    for (var j = 0; j < heads.length; j++) names.push('c' + j);
    each(body.rows, function (tr) {
      each(tr.cells, function (td, j) {
        td.classList.add('c' + j);
        if (!td.hasAttribute('data-v')) td.setAttribute('data-v', td.textContent.trim());
      });
    });
    each(heads, function (th, j) {
      th.classList.add('dl-sort');
      th.setAttribute('data-sort', names[j]);
      th.tabIndex = 0;
      th.title = 'sort by this column';
      th.addEventListener('keydown', function (e) {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); th.click(); }
      });
    });
    body.classList.add('dl-rows');

    var list;
    // numbers by value, before text; text in natural order ("t-2" before "t-10"); blanks ("", "-",
    // "n/a") last either way (list.js multiplies what this returns by -1 for a descending sort)
    function compare(a, b, o) {
      var x = a.values()[o.valueName], y = b.values()[o.valueName], p = num(x), q = num(y);
      if (blank(x) !== blank(y)) return (blank(x) ? 1 : -1) * (o.order === 'desc' ? -1 : 1);
      if (!isNaN(p) && !isNaN(q)) return p - q;
      if (isNaN(p) !== isNaN(q)) return isNaN(p) ? 1 : -1;
      return list.utils.naturalSort.caseInsensitive(x, y);
    }
    list = new List(table, {
      listClass: 'dl-rows', sortClass: 'dl-sort', searchClass: 'dl-no-auto-search', page: 1e9,
      valueNames: names.map(function (c) { return { name: c, attr: 'data-v' }; }),
      sortFunction: compare,
    });

    // the controls
    var tools = table.dataset.tools && document.getElementById(table.dataset.tools);
    if (!tools) {
      tools = el('div', { class: 'dl-tools' });
      table.parentNode.insertBefore(tools, table);
    }
    tools.hidden = false;
    // a table with an id gives its controls ids: ID-search, ID-column, ID-from, ID-to
    function id(e, name) { if (table.id) e.id = table.id + '-' + name; return e; }
    var q = id(el('input', { type: 'search', class: 'dl-q', size: '18', placeholder: 'search', 'aria-label': 'search the rows' }), 'search');
    tools.appendChild(q);
    var cols = table.dataset.score !== undefined
      ? table.dataset.score.split(/\s+/).filter(Boolean).map(Number)
      : names.map(function (c, j) { return j; }).filter(function (j) {
        var vs = list.items.map(function (it) { return it.values()[names[j]]; }).filter(function (v) { return !blank(v); });
        return vs.length > 0 && vs.every(function (v) { return !isNaN(num(v)); });
      });
    var col = null, lo = null, hi = null;
    if (cols.length) {
      col = id(el('select', { class: 'dl-col', 'aria-label': 'column to filter on' }), 'column');
      cols.forEach(function (j) { col.appendChild(el('option', { value: String(j) }, heads[j].textContent)); });
      lo = id(el('input', { class: 'dl-lo', size: '5', inputmode: 'decimal', 'aria-label': 'lowest value' }), 'from');
      hi = id(el('input', { class: 'dl-hi', size: '5', inputmode: 'decimal', 'aria-label': 'highest value' }), 'to');
      var label = el('label', {}, ' ' + (table.dataset.scoreLabel || 'filter') + ' ');
      label.appendChild(col);
      [label, document.createTextNode(' from '), lo, document.createTextNode(' to '), hi].forEach(function (x) {
        tools.appendChild(x);
      });
    }
    var shown = table.dataset.shown && document.getElementById(table.dataset.shown);
    var count = shown || tools.appendChild(el('span', { class: 'dl-shown' }));
    function counted() {
      var n = list.matchingItems.length;
      count.textContent = shown ? String(n) : ' ' + n + ' of ' + total + ' shown';
    }
    var by = table.id ? document.querySelectorAll('select[data-filter-of="' + table.id + '"]') : [];

    // the score filter, with the selects (status, error kind ...), through List.filter
    function filter() {
      var c = col && names[Number(col.value)], a = lo ? parseFloat(lo.value) : NaN, b = hi ? parseFloat(hi.value) : NaN;
      var sel = Array.prototype.filter.call(by, function (s) { return s.value !== ''; });
      if (isNaN(a) && isNaN(b) && !sel.length) { list.filter(); return; }
      list.filter(function (item) {
        var v = c ? num(item.values()[c]) : NaN;
        return sel.every(function (s) { return item.elm.getAttribute('data-' + s.dataset.attr) === s.value; })
          && (isNaN(a) || v >= a) && (isNaN(b) || v <= b);
      });
    }
    // The search, through List.search: every word must occur in one of the row's cells, as shown
    // (not in a cell's data-v). list.js 2.3.1's own matcher escapes the query's regular-expression
    // characters and then looks for the escaped text literally, so it never finds "sample-01" or
    // "0.5": the words are matched here, as it would match them.
    list.items.forEach(function (item) {       // (list.items is reordered by every sort)
      item.dlText = Array.prototype.map.call(item.elm.cells, function (td) { return td.textContent.toLowerCase(); });
    });
    function search() {
      var words = q.value.toLowerCase().split(/\s+/).filter(Boolean);
      list.search(q.value, function () {
        list.items.forEach(function (item) {
          item.found = words.every(function (w) {
            return item.dlText.some(function (t) { return t.indexOf(w) !== -1; });
          });
        });
      });
    }
    // list.js clears the header's sort mark on every search and filter (the rows stay sorted):
    // put it back, and say it to screen readers too
    var sorted = null;
    function mark() {
      each(heads, function (th) {
        th.removeAttribute('aria-sort');
        if (sorted && th === sorted[0]) {
          th.classList.add(sorted[1]);
          th.setAttribute('aria-sort', sorted[1] === 'asc' ? 'ascending' : 'descending');
        }
      });
    }
    list.on('sortComplete', function () {
      sorted = null;
      each(heads, function (th) {
        if (th.classList.contains('asc')) sorted = [th, 'asc'];
        else if (th.classList.contains('desc')) sorted = [th, 'desc'];
      });
      mark();
    });
    list.on('searchComplete', mark);
    list.on('filterComplete', mark);
    list.on('updated', counted);
    q.addEventListener('input', search);
    [col, lo, hi].concat(Array.prototype.slice.call(by)).forEach(function (x) {
      if (x) x.addEventListener(x.tagName === 'SELECT' ? 'change' : 'input', filter);
    });
    counted();
  }

  each(document.querySelectorAll('table'), enhance);
})();
