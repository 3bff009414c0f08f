// `strata events`: the outbox of a store (FORMAT.md, "Events"): each event type with the
// events it keeps, and each consumer with its position and what it still has to see; it
// can also remove a consumer or move it.
import ArgumentParser
import Strata

struct EventsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "The outbox: event types, their kept events, consumers and their positions. Read-only unless --remove or --move.",
        discussion: """
            Positions are VERSION.PLACE: the version of the commit that published the event and its place among \
            that commit's events. `--remove NAME --event TYPE` removes a consumer (its events are deleted once the \
            other consumers are past them); `--move NAME --event TYPE --to POSITION` sets one (registering it), \
            `--to start` to have it receive every kept event again.
            """)

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    @Option(help: "Remove this consumer (with --event).")
    var remove: String?

    @Option(help: "Move this consumer (with --event and --to).")
    var move: String?

    @Option(help: "The event type a consumer reads (its DomainEvent.eventName or type name).")
    var event: String?

    @Option(help: "The position to move the consumer to: VERSION.PLACE, or start.")
    var to: String?

    func validate() throws {
        guard remove == nil || move == nil else { throw ValidationError("give --remove or --move, not both") }
        if remove != nil || move != nil, event == nil { throw ValidationError("--remove and --move need --event TYPE") }
        if move != nil, to.flatMap(Self.position) == nil {
            throw ValidationError("--move needs --to VERSION.PLACE (such as 42.0) or --to start")
        }
        if move == nil, to != nil { throw ValidationError("--to goes with --move") }
    }

    static func position(_ text: String) -> EventPosition? {
        if text == "start" { return .start }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let version = UInt64(parts[0]), let place = UInt64(parts[1]) else { return nil }
        return EventPosition(version: version, sequence: place)
    }

    func run() throws {
        if let remove, let event {
            try withStore(path) { store in
                try store.write { try $0.context.removeEventConsumer(remove, of: event) }
                print("removed consumer \(remove) of \(event)")
            }
            return
        }
        if let move, let event, let position = to.flatMap(Self.position) {
            try withStore(path) { store in
                try store.write { try $0.context.positionEventConsumer(move, of: event, at: position) }
                print("moved consumer \(move) of \(event) to \(position)")
            }
            return
        }
        try withStore(path, mode: .readOnly) { store in
            let (types, consumers) = try store.read { context in (try context.eventTypes(), try context.eventConsumers()) }
            if types.isEmpty && consumers.isEmpty { return print("no events and no consumers") }
            for name in Set(types.map(\.event) + consumers.map(\.event)).sorted() {
                let kept = types.first { $0.event == name }
                let range = kept.map { " (\($0.oldest.map(String.init(describing:)) ?? "-") … \($0.newest.map(String.init(describing:)) ?? "-"))" } ?? ""
                print("\(name): \(kept?.count ?? 0) event(s) kept\(range)")
                for consumer in consumers where consumer.event == name {
                    let limit = consumer.retention.map { ", keeps at most \($0)" } ?? ""
                    let gap = consumer.lostThrough.map { "; fell behind: events through \($0) were deleted unseen" } ?? ""
                    print("  consumer \(consumer.consumer): acknowledged \(consumer.acknowledged), \(consumer.pending) pending\(limit)\(gap)")
                }
            }
        }
    }
}
