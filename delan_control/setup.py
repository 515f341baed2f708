from setuptools import find_packages, setup

package_name = 'delan_control'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='delan_ros maintainers',
    maintainer_email='maintainers@delan-ros.invalid',
    description='Torque controllers, analytic and identified dynamics, trajectories, '
    'simulated plant.',
    license='BSD-3-Clause',
    extras_require={'test': ['pytest']},
    entry_points={
        'console_scripts': [
            'torque_controller = delan_control.nodes.torque_controller:main',
            'sim = delan_control.nodes.sim:main',
            'reference = delan_control.nodes.reference:main',
            'delan-sysid = delan_control.sysid:main',
            'delan-gen-data = delan_control.datagen:main',
        ],
    },
)
