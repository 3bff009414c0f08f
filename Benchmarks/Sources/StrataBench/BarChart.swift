// A grouped bar chart of a run as SVG: one group per workload, one bar per engine. Each
// group is scaled to its fastest engine (workloads differ by orders of magnitude), and
// every bar carries its ops/s and its ratio to Strata, so it reads at a glance.

struct BarChart {
    let results: [Result]
    let engines: [String]
    let workloads: [String]

    static let colors = ["strata": "#1f77b4", "strata-relaxed": "#6baed6", "sqlite": "#ff7f0e", "lmdb": "#2ca02c",
                         "leveldb": "#d62728", "rocksdb": "#9467bd", "fdatasync": "#7f7f7f", "etcd": "#8c564b", "etcd-cluster": "#e377c2"]

    var svg: String {
        let barWidth = 26
        let groupGap = 30
        let plotHeight = 260
        let top = 130
        let left = 20
        let groups = workloads.filter { workload in results.contains { $0.bench == workload } }
        let groupWidth = engines.count * barWidth + groupGap
        let width = left * 2 + max(groups.count, 1) * groupWidth
        let height = top + plotHeight + 90
        var parts: [String] = [##"<svg xmlns="http://www.w3.org/2000/svg" width="\##(width)" height="\##(height)" font-family="sans-serif" font-size="11">"##,
                     ##"<rect width="100%" height="100%" fill="white"/>"##,
                     ##"<text x="\##(left)" y="22" font-size="15" font-weight="bold">Strata and its peers: operations per second</text>"##,
                     ##"<text x="\##(left)" y="40" fill="#555">Each workload's bars are scaled to its fastest engine; labels: ops/s and the ratio to strata.</text>"##]
        for (index, engine) in engines.enumerated() {
            let x = left + index * 120
            parts.append(##"<rect x="\##(x)" y="50" width="12" height="12" fill="\##(Self.colors[engine] ?? "#999")"/>"##)
            parts.append(##"<text x="\##(x + 16)" y="60">\##(engine)</text>"##)
        }
        let baseline = top + plotHeight
        for (groupIndex, workload) in groups.enumerated() {
            let row = results.filter { $0.bench == workload }
            let fastest = row.map(\.opsPerSecond).max() ?? 1
            let strata = row.first { $0.engine == "strata" }?.opsPerSecond
            let groupX = left + groupIndex * groupWidth
            for (index, engine) in engines.enumerated() {
                guard let result = row.first(where: { $0.engine == engine }) else { continue }
                let barHeight = max(1, Int(Double(plotHeight - 30) * result.opsPerSecond / fastest))
                let x = groupX + index * barWidth
                let y = baseline - barHeight
                parts.append(##"<rect x="\##(x)" y="\##(y)" width="\##(barWidth - 4)" height="\##(barHeight)" fill="\##(Self.colors[engine] ?? "#999")"/>"##)
                let ratio = strata.map { " " + format(result.opsPerSecond / $0) + "×" } ?? ""
                let labelX = x + (barWidth - 4) / 2
                parts.append(##"<text x="\##(labelX)" y="\##(y - 4)" font-size="9" text-anchor="start" transform="rotate(-60 \##(labelX) \##(y - 4))">\##(short(result.opsPerSecond))\##(ratio)</text>"##)
            }
            let centre = groupX + engines.count * barWidth / 2
            parts.append(##"<text x="\##(centre)" y="\##(baseline + 16)" text-anchor="middle">\##(workload)</text>"##)
        }
        parts.append(##"<line x1="\##(left)" y1="\##(baseline)" x2="\##(width - left)" y2="\##(baseline)" stroke="#333"/>"##)
        parts.append("</svg>")
        return parts.joined(separator: "\n") + "\n"
    }

    private func short(_ value: Double) -> String {
        if value >= 1_000_000 { return format(value / 1_000_000) + "M" }
        if value >= 1_000 { return format(value / 1_000) + "k" }
        return format(value)
    }

    private func format(_ value: Double) -> String {
        let digits = value >= 100 ? 0 : value >= 10 ? 1 : 2
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let rounded = (value * scale).rounded() / scale
        return digits == 0 ? String(Int(rounded)) : String(rounded)
    }
}
