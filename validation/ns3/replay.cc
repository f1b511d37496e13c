// Replay a rapidllm chunk schedule on a packet-level ns-3 network and print completion times as JSON.
//
//   replay SCHEDULE.json [--packet-bytes N]
//
// SCHEDULE.json is written by rapidllm.network.export (format "rapidllm-ns3-schedule/1"): the directed links
// of the fabric (source node, destination node, bytes/s, seconds) and the flows (one per chunk transfer: source
// node, destination node, bytes, release time, route as link ids, dependencies on earlier flows, owning
// collective). See validation/ns3/README.md for the modelling choices; in short:
//
//  * every directed link is its own ns-3 PointToPointChannel with the link's DataRate and Delay; switches are
//    plain nodes that forward packets (store and forward per packet, no processing delay);
//  * no IP, no TCP: packets carry a tag (flow id, hop) and every node forwards them on the flow's exported
//    route (source routing), so ns-3 and rapidllm use the same paths, also around failed links;
//  * a flow of S bytes is ceil(S/P) packets of P wire bytes (the PPP header counts towards P), all handed to
//    the source device's queue when the flow starts (a NIC sending the chunk back to back at line rate);
//  * device queues are deep enough never to drop (lossless fabric: NVLink and InfiniBand are credit based);
//  * a flow has arrived when its last packet reaches the destination; flows whose dependencies have all
//    arrived start at once (or at their release time, if later).
#include "json.h"

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace ns3;

namespace
{

class FlowTag : public Tag
{
  public:
    uint32_t flow = 0;
    uint32_t hop = 0;

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("rapidllm::FlowTag").SetParent<Tag>().AddConstructor<FlowTag>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }
    uint32_t GetSerializedSize() const override { return 8; }
    void Serialize(TagBuffer b) const override
    {
        b.WriteU32(flow);
        b.WriteU32(hop);
    }
    void Deserialize(TagBuffer b) override
    {
        flow = b.ReadU32();
        hop = b.ReadU32();
    }
    void Print(std::ostream& os) const override { os << "flow=" << flow << " hop=" << hop; }
};

constexpr uint16_t kProto = 0x0800;   // any protocol the PPP header can carry; no IP stack is installed
constexpr uint32_t kPppHeader = 2;

struct State
{
    uint64_t packetBytes = 4096;
    std::vector<int64_t> linkSrc, linkDst;
    std::vector<Ptr<NetDevice>> txDev;            // per link id (null for failed links)
    std::vector<uint64_t> bytes;
    std::vector<double> release, finish;
    std::vector<int64_t> routeOf, routePtr, routeLinks, depPtr, depIdx;
    std::vector<std::vector<int64_t>> succ;
    std::vector<int64_t> remaining;               // unfinished dependencies per flow
    std::vector<uint64_t> packetsLeft;            // packets of the flow still to arrive
    uint64_t packetHops = 0;
    uint64_t done = 0;
} S;

int64_t RouteLink(uint32_t flow, uint32_t hop)
{
    int64_t r = S.routeOf[flow];
    return S.routeLinks[S.routePtr[r] + hop];
}

uint32_t RouteLen(uint32_t flow)
{
    int64_t r = S.routeOf[flow];
    return static_cast<uint32_t>(S.routePtr[r + 1] - S.routePtr[r]);
}

void Transmit(Ptr<Packet> p, int64_t link)
{
    Ptr<NetDevice> dev = S.txDev.at(link);
    if (!dev)
    {
        std::cerr << "route uses failed link " << link << "\n";
        std::exit(3);
    }
    ++S.packetHops;
    if (!dev->Send(p, dev->GetBroadcast(), kProto))
    {
        std::cerr << "packet dropped on link " << link << " (queue full)\n";
        std::exit(3);
    }
}

void StartFlow(uint32_t i);

void FinishFlow(uint32_t i)
{
    double now = Simulator::Now().GetSeconds();
    S.finish[i] = now;
    ++S.done;
    for (int64_t s : S.succ[i])
    {
        if (--S.remaining[s] == 0)
        {
            if (S.release[s] > now)
                Simulator::Schedule(Seconds(S.release[s]) - Simulator::Now(), &StartFlow, s);
            else
                StartFlow(static_cast<uint32_t>(s));
        }
    }
}

void StartFlow(uint32_t i)
{
    uint32_t hops = RouteLen(i);
    if (hops == 0)
    {
        FinishFlow(i);   // local barrier (source == destination)
        return;
    }
    uint64_t total = std::max<uint64_t>(S.bytes[i], kPppHeader);
    uint64_t n = (total + S.packetBytes - 1) / S.packetBytes;
    S.packetsLeft[i] = n;
    int64_t link = RouteLink(i, 0);
    for (uint64_t k = 0; k < n; ++k)
    {
        uint64_t wire = (k + 1 < n) ? S.packetBytes : total - (n - 1) * S.packetBytes;
        if (wire < kPppHeader)
            wire = kPppHeader;
        Ptr<Packet> p = Create<Packet>(static_cast<uint32_t>(wire - kPppHeader));
        FlowTag tag;
        tag.flow = i;
        tag.hop = 0;
        p->AddPacketTag(tag);
        Transmit(p, link);
    }
}

void Receive(Ptr<NetDevice>, Ptr<const Packet> packet, uint16_t, const Address&, const Address&,
             NetDevice::PacketType)
{
    FlowTag tag;
    if (!packet->PeekPacketTag(tag))
    {
        std::cerr << "untagged packet\n";
        std::exit(3);
    }
    uint32_t next = tag.hop + 1;
    if (next == RouteLen(tag.flow))
    {
        if (--S.packetsLeft[tag.flow] == 0)
            FinishFlow(tag.flow);
        return;
    }
    Ptr<Packet> p = packet->Copy();
    p->RemovePacketTag(tag);
    tag.hop = next;
    p->AddPacketTag(tag);
    Transmit(p, RouteLink(tag.flow, next));
}

std::vector<int64_t> Ints(const mini_json::Value& v)
{
    std::vector<int64_t> out;
    for (double x : v.numbers())
        out.push_back(static_cast<int64_t>(std::llround(x)));
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    Time::SetResolution(Time::PS);   // per-packet serialization times of a few ns must not round
    if (argc < 2)
    {
        std::cerr << "usage: replay SCHEDULE.json [--packet-bytes N]\n";
        return 2;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::ifstream in(argv[1]);
    if (!in)
    {
        std::cerr << "cannot read " << argv[1] << "\n";
        return 2;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    mini_json::Value doc;
    try
    {
        doc = mini_json::parse(buf.str());
        if (doc.at("format").text != "rapidllm-ns3-schedule/1")
            throw std::runtime_error("unknown format '" + doc.at("format").text + "'");
    }
    catch (const std::exception& e)
    {
        std::cerr << argv[1] << ": " << e.what() << "\n";
        return 2;
    }
    S.packetBytes = static_cast<uint64_t>(doc.at("packet_bytes").number);
    for (int a = 2; a + 1 < argc; a += 2)
        if (std::string(argv[a]) == "--packet-bytes")
            S.packetBytes = std::stoull(argv[a + 1]);
    if (S.packetBytes <= kPppHeader || S.packetBytes > 65535)
    {
        std::cerr << "packet bytes must lie in 3..65535\n";
        return 2;
    }

    const auto& links = doc.at("links");
    const auto& flows = doc.at("flows");
    S.linkSrc = Ints(links.at("src"));
    S.linkDst = Ints(links.at("dst"));
    std::vector<double> bw = links.at("bandwidth").numbers();
    std::vector<double> lat = links.at("latency").numbers();
    std::vector<int64_t> alive = Ints(links.at("alive"));
    std::vector<int64_t> fsrc = Ints(flows.at("src"));
    S.bytes.clear();
    for (double b : flows.at("bytes").numbers())
        S.bytes.push_back(static_cast<uint64_t>(std::llround(b)));
    S.release = flows.at("release").numbers();
    S.routeOf = Ints(flows.at("route_of"));
    S.routePtr = Ints(flows.at("route_ptr"));
    S.routeLinks = Ints(flows.at("route_links"));
    S.depPtr = Ints(flows.at("dep_ptr"));
    S.depIdx = Ints(flows.at("dep_idx"));
    std::vector<int64_t> group = Ints(flows.at("group"));
    size_t nFlows = fsrc.size();
    size_t nGroups = static_cast<size_t>(doc.at("groups").number);

    // Deep enough that no queue can ever drop: every packet of the schedule in one queue.
    uint64_t maxPackets = 16;
    for (size_t i = 0; i < nFlows; ++i)
        maxPackets += S.bytes[i] / S.packetBytes + 1;

    NodeContainer nodes;
    nodes.Create(static_cast<uint32_t>(doc.at("nodes").number));
    S.txDev.assign(S.linkSrc.size(), nullptr);
    PointToPointHelper p2p;
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(std::to_string(maxPackets) + "p"));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(static_cast<uint16_t>(S.packetBytes)));
    for (size_t l = 0; l < S.linkSrc.size(); ++l)
    {
        if (!alive[l])
            continue;   // a failed link is not built at all
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(std::llround(bw[l] * 8)))));
        p2p.SetChannelAttribute("Delay", TimeValue(Seconds(lat[l])));
        NetDeviceContainer d = p2p.Install(nodes.Get(S.linkSrc[l]), nodes.Get(S.linkDst[l]));
        S.txDev[l] = d.Get(0);
        nodes.Get(S.linkDst[l])->RegisterProtocolHandler(MakeCallback(&Receive), kProto, d.Get(1));
    }

    S.finish.assign(nFlows, -1.0);
    S.packetsLeft.assign(nFlows, 0);
    S.succ.assign(nFlows, {});
    S.remaining.assign(nFlows, 0);
    for (size_t i = 0; i < nFlows; ++i)
    {
        S.remaining[i] = S.depPtr[i + 1] - S.depPtr[i];
        for (int64_t k = S.depPtr[i]; k < S.depPtr[i + 1]; ++k)
            S.succ[S.depIdx[k]].push_back(static_cast<int64_t>(i));
    }
    for (size_t i = 0; i < nFlows; ++i)
        if (S.remaining[i] == 0)
            Simulator::Schedule(Seconds(S.release[i]), &StartFlow, static_cast<uint32_t>(i));

    auto t1 = std::chrono::steady_clock::now();
    Simulator::Run();
    auto t2 = std::chrono::steady_clock::now();
    Simulator::Destroy();
    if (S.done != nFlows)
    {
        std::cerr << "only " << S.done << " of " << nFlows << " flows finished (dependency cycle?)\n";
        return 3;
    }

    std::vector<double> groupFinish(nGroups, 0.0);
    for (size_t i = 0; i < nFlows; ++i)
        groupFinish[group[i]] = std::max(groupFinish[group[i]], S.finish[i]);
    std::printf("{\"format\": \"rapidllm-ns3-result/1\", \"ns3_version\": \"3.37\", \"packet_bytes\": %llu,\n",
                static_cast<unsigned long long>(S.packetBytes));
    std::printf(" \"setup_wall_s\": %.6f, \"run_wall_s\": %.6f, \"packet_hops\": %llu,\n",
                std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
                static_cast<unsigned long long>(S.packetHops));
    std::printf(" \"group_finish_s\": [");
    for (size_t g = 0; g < nGroups; ++g)
        std::printf("%s%.12e", g ? ", " : "", groupFinish[g]);
    std::printf("],\n \"finish_s\": [");
    for (size_t i = 0; i < nFlows; ++i)
        std::printf("%s%.12e", i ? ", " : "", S.finish[i]);
    std::printf("]}\n");
    return 0;
}
