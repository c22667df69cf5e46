// A small Grafana dashboard library in plain jsonnet (grafonnet is not vendorable offline).
// Modern panel types only: timeseries, stat, table, bargauge. Every panel queries the
// dashboard's datasource variable; ids and positions are assigned by `dashboard`.
local datasource = { type: 'prometheus', uid: '${datasource}' };

local thresholdSteps(steps) = {
  mode: 'absolute',
  steps: [{ color: 'green', value: null }] + [
    { color: s[1], value: s[0] }
    for s in steps
  ],
};

// Every panel says what it shows, what is normal and what to do when it is not: whoever
// opens the dashboard at 3 a.m. reads it there (the "i" beside the title), not in the docs.
local panel(type, title, targets, unit, description, thresholds, width) =
  assert std.length(std.stripChars(description, ' \n')) > 0 : 'panel "%s" has no description' % title;
  {
    type: type,
    title: title,
    description: std.rstripChars(description, '\n'),
    datasource: datasource,
    targets: [targets[i] { refId: std.char(std.codepoint('A') + i) } for i in std.range(0, std.length(targets) - 1)],
    fieldConfig: {
      defaults: {
        unit: unit,
        thresholds: thresholdSteps(thresholds),
      },
      overrides: [],
    },
    // Consumed by `dashboard` for the layout, then removed.
    width:: width,
  };

{
  // A range query; `legend` is Grafana's legendFormat ({{label}} placeholders).
  target(expr, legend=''):: {
    datasource: datasource,
    expr: expr,
    legendFormat: legend,
    range: true,
    instant: false,
  },

  // An instant query returned as a table: for "worst N" lists, one evaluation, not a range.
  instantTarget(expr):: {
    datasource: datasource,
    expr: expr,
    format: 'table',
    range: false,
    instant: true,
  },

  timeseries(title, targets, unit='short', description='', thresholds=[], width=8, stack=false, min=null, max=null)::
    panel('timeseries', title, targets, unit, description, thresholds, width) {
      fieldConfig+: {
        defaults+: {
          [if min != null then 'min']: min,
          [if max != null then 'max']: max,
          custom: {
            drawStyle: 'line',
            lineWidth: 1,
            fillOpacity: if stack then 30 else 10,
            showPoints: 'never',
            spanNulls: false,
            stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
            thresholdsStyle: { mode: if thresholds == [] then 'off' else 'dashed' },
          },
          color: { mode: 'palette-classic' },
        },
      },
      options: {
        legend: { displayMode: 'table', placement: 'bottom', showLegend: true, calcs: ['lastNotNull', 'max'] },
        tooltip: { mode: 'multi', sort: 'desc' },
      },
    },

  stat(title, targets, unit='short', description='', thresholds=[], width=4)::
    panel('stat', title, targets, unit, description, thresholds, width) {
      fieldConfig+: { defaults+: { color: { mode: 'thresholds' } } },
      options: {
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
        colorMode: 'value',
        graphMode: 'area',
        justifyMode: 'auto',
        textMode: 'auto',
        orientation: 'auto',
      },
    },

  // `columns`: [label (or 'Value'), header] pairs, in display order; other fields are hidden.
  table(title, targets, columns, unit='short', description='', thresholds=[], width=8)::
    panel('table', title, targets, unit, description, thresholds, width) {
      options: { showHeader: true, cellHeight: 'sm', footer: { show: false, reducer: ['sum'], fields: '' } },
      transformations: [
        { id: 'filterFieldsByName', options: { include: { names: [column[0] for column in columns] } } },
        {
          id: 'organize',
          options: {
            indexByName: { [columns[i][0]]: i for i in std.range(0, std.length(columns) - 1) },
            renameByName: { [column[0]]: column[1] for column in columns },
          },
        },
      ],
    },

  barGauge(title, targets, unit='short', description='', thresholds=[], width=8, max=null)::
    panel('bargauge', title, targets, unit, description, thresholds, width) {
      fieldConfig+: { defaults+: { min: 0, [if max != null then 'max']: max, color: { mode: 'thresholds' } } },
      options: {
        orientation: 'horizontal',
        displayMode: 'gradient',
        showUnfilled: true,
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      },
    },

  row(title, panels, height=8):: { title: title, panels: panels, height: height },

  datasourceVariable(default):: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    current: { text: default, value: default },
    regex: '',
    hide: 0,
    refresh: 1,
  },

  queryVariable(name, label, query, multi=false, hide=0):: {
    name: name,
    label: label,
    type: 'query',
    datasource: datasource,
    query: { query: query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
    refresh: 2,
    sort: 1,
    hide: hide,
    multi: multi,
    includeAll: multi,
  },

  // Rows laid out top to bottom, panels left to right on Grafana's 24-column grid.
  dashboard(uid, title, description, tags, refresh, timeFrom, timezone, variables, rows)::
    local rowStarts = std.foldl(
      function(acc, r) acc + [acc[std.length(acc) - 1] + 1 + std.length(r.panels)],
      rows,
      [1]
    );
    local heights = std.foldl(
      function(acc, r) acc + [acc[std.length(acc) - 1] + 1 + r.height * std.ceil(std.foldl(function(w, p) w + p.width, r.panels, 0) / 24)],
      rows,
      [0]
    );
    local layout(row, rowIndex) =
      local xs = std.foldl(function(acc, p) acc + [acc[std.length(acc) - 1] + p.width], row.panels, [0]);
      [
        {
          type: 'row',
          title: row.title,
          collapsed: false,
          panels: [],
          id: rowStarts[rowIndex],
          gridPos: { x: 0, y: heights[rowIndex], w: 24, h: 1 },
        },
      ] + [
        row.panels[i] {
          id: rowStarts[rowIndex] + 1 + i,
          gridPos: {
            x: xs[i] % 24,
            y: heights[rowIndex] + 1 + row.height * std.floor(xs[i] / 24),
            w: row.panels[i].width,
            h: row.height,
          },
        }
        for i in std.range(0, std.length(row.panels) - 1)
      ];
    {
      uid: uid,
      title: title,
      description: description,
      tags: tags,
      // Generated, and provisioned from files or ConfigMaps: an edit made in Grafana is lost
      // at the next sync. Change the jsonnet, or save a copy under another uid.
      editable: false,
      graphTooltip: 1,
      refresh: refresh,
      schemaVersion: 39,
      time: { from: timeFrom, to: 'now' },
      timezone: timezone,
      timepicker: {},
      annotations: { list: [] },
      links: [
        {
          title: 'Kube Scale dashboards',
          type: 'dashboards',
          tags: tags,
          asDropdown: true,
          includeVars: true,
          keepTime: true,
          icon: 'external link',
          targetBlank: false,
          url: '',
          tooltip: '',
        },
      ],
      templating: { list: variables },
      panels: std.flattenArrays([layout(rows[i], i) for i in std.range(0, std.length(rows) - 1)]),
    },
}
