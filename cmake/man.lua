-- A page of the manual (docs/*.md) as a man page: pandoc --lua-filter cmake/man.lua.
--
-- The page's "<!-- man: NAMES - what it is -->" line becomes the NAME section and its title
-- (the level-1 heading) goes; level-2 headings become sections (SYNOPSIS, ...), deeper ones
-- subsections. A link to another page of the manual reads "text (vramfit-PAGE(1))" and
-- that page joins SEE ALSO; other links keep their text only, and images go.

local input = PANDOC_STATE.input_files[1] or ""
local docs = input:match("^(.*)/[^/]*$") or "."
local this = input:match("([^/]*)%.md$") or ""

local function man_name(stem)
  if stem == "README" then return "vramfit" end
  return "vramfit-" .. stem
end

-- The man page a link target names, or nil: a page of docs/ that has a man line.
local has_man = {}
local function page_of(target)
  local file = target:match("^([%w._-]+)%.md") -- same folder only: ../ leaves the manual
  if not file then return nil end
  if has_man[file] == nil then
    local f = io.open(docs .. "/" .. file .. ".md", "r")
    local first = f and f:read("l") or ""
    if f then f:close() end
    has_man[file] = first:match("^<!%-%- man: ") ~= nil
  end
  if has_man[file] and file ~= this then return man_name(file) end
  return nil
end

local see_also, seen = {}, {}

local function refer(name)
  if not seen[name] then
    seen[name] = true
    table.insert(see_also, name)
  end
end

local inlines = {
  Link = function(el)
    local name = page_of(el.target)
    if not name then return el.content end
    refer(name)
    local ref = pandoc.Str(name .. "(1)")
    -- a link that shows the file's name shows the page's name instead
    if pandoc.utils.stringify(el.content):match("%.md$") then return ref end
    local out = pandoc.List(el.content)
    out:extend({ pandoc.Space(), pandoc.Str("("), ref, pandoc.Str(")") })
    return out
  end,
  Image = function() return {} end,
}

local function uppercase(inl)
  return pandoc.walk_inline(pandoc.Span(inl), {
    Str = function(s) return pandoc.Str(pandoc.text.upper(s.text)) end,
    Code = function(c) return pandoc.Code(pandoc.text.upper(c.text)) end,
  }).content
end

function Pandoc(doc)
  local name_line
  local blocks = pandoc.List()
  for _, b in ipairs(doc.blocks) do
    if b.t == "RawBlock" then
      name_line = name_line or b.text:match("^<!%-%- man: (.-) %-%->")
    elseif b.t == "Header" and b.level == 1 then
      -- the page's title: NAME says it
    elseif b.t == "Header" then
      local level = b.level == 2 and 1 or 2
      local content = level == 1 and uppercase(b.content) or b.content
      blocks:insert(pandoc.Header(level, content))
    elseif b.t == "Para" and #b.content > 0 and #b.content:filter(function(i) return i.t ~= "Image" end) == 0 then
      -- a picture alone: nothing to show on a terminal
    else
      blocks:insert(b)
    end
  end
  assert(name_line, input .. ": no '<!-- man: NAMES - what it is -->' line")
  blocks = pandoc.List(pandoc.walk_block(pandoc.Div(blocks), inlines).content)

  local names, what = name_line:match("^(.-) %- (.*)$")
  assert(names, input .. ": the man line is not 'NAMES - what it is'")
  local name_para = pandoc.List()
  for word in (names .. " "):gmatch("(%S+) ") do name_para:extend({ pandoc.Str(word), pandoc.Space() }) end
  name_para:extend({ pandoc.RawInline("man", "\\-"), pandoc.Space(), pandoc.Str(what) })
  local out = pandoc.List({ pandoc.Header(1, "NAME"), pandoc.Para(name_para) })
  out:extend(blocks)

  if this ~= "README" then table.insert(see_also, 1, "vramfit") end
  local refs = pandoc.List()
  for i, n in ipairs(see_also) do
    if i > 1 then refs:extend({ pandoc.Str(","), pandoc.Space() }) end
    refs:extend({ pandoc.Strong({ pandoc.Str(n) }), pandoc.Str("(1)") })
  end
  if #refs > 0 then
    local at
    for i, b in ipairs(out) do
      if b.t == "Header" and b.level == 1 and pandoc.utils.stringify(b) == "SEE ALSO" then at = i end
    end
    if at then
      out:insert(at + 1, pandoc.Para(refs))
    else
      out:extend({ pandoc.Header(1, "SEE ALSO"), pandoc.Para(refs) })
    end
  end

  -- Tables: each column as wide as its longest word and half its mean text ask, all of them
  -- within the 80 columns of a terminal.
  out = pandoc.List(pandoc.walk_block(pandoc.Div(out), {
    Table = function(t)
      local n = #t.colspecs
      local longest, total, rows = {}, {}, 0
      for i = 1, n do longest[i], total[i] = 4, 0 end
      local function measure(row)
        for i, cell in ipairs(row.cells) do
          local text = pandoc.utils.stringify(cell.contents)
          for word in text:gmatch("%S+") do longest[i] = math.max(longest[i], utf8.len(word) or #word) end
          total[i] = total[i] + (utf8.len(text) or #text)
        end
        rows = rows + 1
      end
      for _, row in ipairs(t.head.rows) do measure(row) end
      for _, body in ipairs(t.bodies) do
        for _, row in ipairs(body.body) do measure(row) end
      end
      local ask, sum = {}, 0
      for i = 1, n do
        ask[i] = longest[i] + total[i] / rows / 2
        sum = sum + ask[i]
      end
      for i, spec in ipairs(t.colspecs) do spec[2] = 0.92 * ask[i] / sum end
      return t
    end,
  }).content)
  return pandoc.Pandoc(out, doc.meta)
end
