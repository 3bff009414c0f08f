// The one module a user imports: it re-exports the engine's and the log's public types
// (options, errors, durability modes) that appear in the contexts' API.
@_exported import Engine
@_exported import WAL
