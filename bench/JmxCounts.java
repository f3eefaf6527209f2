// Prints "<object name>\t<Count>" for every MBean matching a pattern (Kafka's JmxTool
// cannot query patterns in 3.1). Run by bench/bench_canary.py as a single-file program:
//   java bench/JmxCounts.java service:jmx:rmi:///jndi/rmi://127.0.0.1:PORT/jmxrmi 'domain:key=value,*'
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class JmxCounts {
    public static void main(String[] args) throws Exception {
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(args[0]))) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            for (ObjectName n : s.queryNames(new ObjectName(args[1]), null)) {
                System.out.println(n + "\t" + s.getAttribute(n, "Count"));
            }
        }
    }
}
