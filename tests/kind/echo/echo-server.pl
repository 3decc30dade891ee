# Answers every TCP connection on port 8080 with one line naming the node it
# runs on (NODE_NAME, from the pod's spec.nodeName), and logs each step to
# stdout, so `kubectl logs` shows what the container really did.
use strict;
use warnings;
use IO::Socket::INET;

$| = 1;
my $node = $ENV{NODE_NAME} // 'unknown';
my $server = IO::Socket::INET->new(LocalPort => 8080, Listen => 16, ReuseAddr => 1, Proto => 'tcp')
  or die "listen on 8080: $!\n";
print "echo-server on $node listening on 8080\n";
while (my $client = $server->accept) {
  print $client "hello from $node\n";
  printf "served %s\n", $client->peerhost;
  close $client;
}
