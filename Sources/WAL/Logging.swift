// Strata logs through swift-log and, like the ecosystem's libraries, is silent unless the
// application asks: `EngineOptions.logger` (and `WALOptions.logger`) default to a logger
// labelled "strata" that drops everything; pass `Logger(label: "strata")` to log through
// the handler the application bootstrapped. What is logged: opening a store (info;
// damage cut from a log's tail and a rejected meta page: warning), checkpoints (debug;
// failures: error), released log segments (debug), failed writes and fdatasyncs (error).
import Logging

extension Logger {
    /// The default logger of every Strata component: labelled "strata", logging nothing.
    package static let strataSilent = Logger(label: "strata", factory: { _ in SwiftLogNoOpLogHandler() })
}
