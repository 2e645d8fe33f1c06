-- Argo CD health of a SpeculativeDeployment, from the conditions the operator writes (kstatus convention).
local hs = {}
local generation = obj.metadata.generation or 0
if obj.status == nil or obj.status.observedGeneration == nil or obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. tostring(generation)
  return hs
end
local function condition(kind)
  for _, c in ipairs(obj.status.conditions or {}) do
    if c.type == kind then
      return c
    end
  end
  return nil
end
local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end
local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready)
  return hs
end
local reconciling = condition("Reconciling")
if obj.status.phase == "Paused" then
  -- a manual gate or spec.paused: waits for promote or resume (a pause after a failure is Stalled)
  hs.status = "Suspended"
else
  hs.status = "Progressing"
end
if reconciling ~= nil then
  hs.message = said(reconciling)
else
  hs.message = "Waiting for the operator's health conditions"
end
return hs
