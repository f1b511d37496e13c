// Why replay.cc sends raw packets, not TCP: one TCP BulkSend of S bytes over one point-to-point link, timed
// from the application start to the last byte at the sink, next to the ideal S/B + latency.
//
//   tcp_single_link BYTES BITS_PER_S DELAY_S [INITIAL_CWND_SEGMENTS] [SEGMENT_BYTES]
//
// Prints {"tcp_s": ..., "ideal_s": ..., "excess": ...}. Defaults: ns-3's TCP (NewReno, initial window 10
// segments, 1448-byte segments on a 1500-byte MTU); buffers are made large enough not to limit the window.
#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <cstdio>
#include <string>

using namespace ns3;

namespace
{
uint64_t g_target = 0;
uint64_t g_received = 0;
double g_done = -1.0;

void OnRx(Ptr<const Packet> p, const Address&)
{
    g_received += p->GetSize();
    if (g_done < 0 && g_received >= g_target)
        g_done = Simulator::Now().GetSeconds();
}
} // namespace

int main(int argc, char** argv)
{
    Time::SetResolution(Time::PS);
    if (argc < 4)
    {
        std::fprintf(stderr, "usage: tcp_single_link BYTES BITS_PER_S DELAY_S [INITIAL_CWND] [SEGMENT_BYTES]\n");
        return 2;
    }
    g_target = std::stoull(argv[1]);
    uint64_t bps = std::stoull(argv[2]);
    double delay = std::stod(argv[3]);
    uint32_t cwnd = argc > 4 ? std::stoul(argv[4]) : 10;
    uint32_t seg = argc > 5 ? std::stoul(argv[5]) : 1448;
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(seg));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(cwnd));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1u << 30));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1u << 30));

    NodeContainer nodes;
    nodes.Create(2);
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(bps)));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(seg + 52));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1000000p"));
    NetDeviceContainer devs = p2p.Install(nodes);
    InternetStackHelper stack;
    stack.Install(nodes);
    Ipv4AddressHelper addr;
    addr.SetBase("10.0.0.0", "255.255.255.0");
    Ipv4InterfaceContainer ifs = addr.Assign(devs);

    uint16_t port = 9;
    BulkSendHelper send("ns3::TcpSocketFactory", InetSocketAddress(ifs.GetAddress(1), port));
    send.SetAttribute("MaxBytes", UintegerValue(g_target));
    send.SetAttribute("SendSize", UintegerValue(seg));
    ApplicationContainer tx = send.Install(nodes.Get(0));
    tx.Start(Seconds(0.0));
    PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
    ApplicationContainer rx = sink.Install(nodes.Get(1));
    rx.Start(Seconds(0.0));
    rx.Get(0)->TraceConnectWithoutContext("Rx", MakeCallback(&OnRx));

    Simulator::Stop(Seconds(10.0));
    Simulator::Run();
    Simulator::Destroy();
    double ideal = static_cast<double>(g_target) * 8.0 / static_cast<double>(bps) + delay;
    std::printf("{\"bytes\": %llu, \"tcp_s\": %.9e, \"ideal_s\": %.9e, \"excess\": %.4f, \"initial_cwnd\": %u, "
                "\"segment_bytes\": %u}\n",
                static_cast<unsigned long long>(g_target), g_done, ideal, g_done / ideal - 1.0, cwnd, seg);
    return g_done < 0 ? 3 : 0;
}
